#include "csrc/rules/text.h"

#include <cctype>
#include <sstream>

namespace ascend_kv {

std::string DtypeName(at::ScalarType dtype)
{
    switch (dtype) {
        case at::kHalf: return "float16";
        case at::kBFloat16: return "bfloat16";
        case at::kFloat: return "float32";
        case at::kDouble: return "float64";
        case at::kChar: return "int8";
        case at::kByte: return "uint8";
        case at::kShort: return "int16";
        case at::kInt: return "int32";
        case at::kLong: return "int64";
        case at::kBool: return "bool";
        case at::kComplexHalf: return "complex32";
        case at::kComplexFloat: return "complex64";
        case at::kComplexDouble: return "complex128";
        case at::kUInt16: return "uint16";
        case at::kUInt32: return "uint32";
        case at::kUInt64: return "uint64";
        case at::kFloat8_e4m3fn: return "float8_e4m3fn";
        case at::kFloat8_e5m2: return "float8_e5m2";
        case at::kFloat8_e4m3fnuz: return "float8_e4m3fnuz";
        case at::kFloat8_e5m2fnuz: return "float8_e5m2fnuz";
        case at::kFloat8_e8m0fnu: return "float8_e8m0fnu";
        default: {
            // The other types as Python names them: c10's name in lower case ("UInt4" -> "uint4",
            // "Float4_e2m1fn_x2" -> "float4_e2m1fn_x2", "Bits16" -> "bits16", "QInt8" -> "qint8").
            std::string name = c10::toString(dtype);
            for (char& c : name) {
                c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
            }
            return name;
        }
    }
}

std::string TorchDtype(at::ScalarType dtype) { return "torch." + DtypeName(dtype); }

std::string DtypeList(c10::ArrayRef<at::ScalarType> dtypes)
{
    std::string text;
    for (size_t i = 0; i < dtypes.size(); ++i) {
        if (i > 0) {
            text += i + 1 == dtypes.size() ? " or " : ", ";
        }
        text += DtypeName(dtypes[i]);
    }
    return text;
}

namespace {

template <typename Values>
std::string Sequence(Values values, const char* open, const char* close, bool tuple)
{
    std::ostringstream out;
    out << open;
    for (size_t i = 0; i < values.size(); ++i) {
        out << (i ? ", " : "") << values[i];
    }
    if (tuple && values.size() == 1) {
        out << ",";
    }
    out << close;
    return out.str();
}

}  // namespace

std::string Tuple(c10::SymIntArrayRef values) { return Sequence(values, "(", ")", true); }
std::string Tuple(c10::IntArrayRef values) { return Sequence(values, "(", ")", true); }
std::string List(c10::SymIntArrayRef values) { return Sequence(values, "[", "]", false); }

}  // namespace ascend_kv
