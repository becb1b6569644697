"""What users call: the public functions, the ATB-style objects and enums, the layout helpers, the errors."""
