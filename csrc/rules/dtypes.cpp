#include "csrc/rules/dtypes.h"

#include <algorithm>

namespace ascend_kv {

namespace {
constexpr at::ScalarType kCacheDtypes[] = {
    at::kHalf, at::kBFloat16, at::kChar, at::kByte, at::kShort, at::kUInt16, at::kInt, at::kUInt32, at::kFloat,
    at::kFloat8_e4m3fn, at::kFloat8_e5m2, at::kFloat8_e4m3fnuz, at::kFloat8_e5m2fnuz, at::kFloat8_e8m0fnu,
};
constexpr at::ScalarType kAtbCacheDtypes[] = {at::kHalf, at::kBFloat16, at::kChar};
constexpr at::ScalarType kIndexDtypes[] = {at::kInt, at::kLong};

template <size_t N>
bool Contains(const at::ScalarType (&table)[N], at::ScalarType dtype)
{
    return std::find(std::begin(table), std::end(table), dtype) != std::end(table);
}
}  // namespace

c10::ArrayRef<at::ScalarType> CacheDtypes() { return kCacheDtypes; }
c10::ArrayRef<at::ScalarType> AtbCacheDtypes() { return kAtbCacheDtypes; }
c10::ArrayRef<at::ScalarType> IndexDtypes() { return kIndexDtypes; }
bool IsCacheDtype(at::ScalarType dtype) { return Contains(kCacheDtypes, dtype); }
bool IsIndexDtype(at::ScalarType dtype) { return dtype == at::kInt || dtype == at::kLong; }

}  // namespace ascend_kv
