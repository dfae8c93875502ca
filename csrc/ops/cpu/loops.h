// Parallel, vectorized loop drivers for the CPU kernels.
//
// Every kernel is written once, as an operation on at::vec::Vectorized values; tails are
// handled with partial loads/stores of the same vectors, so there is a single code path
// and the last elements round exactly like the rest.
#pragma once

#include "ops/common/param_layout.h"

#include <ATen/Parallel.h>
#include <ATen/cpu/vec/vec.h>
#include <c10/macros/Macros.h>

#if defined(CPU_CAPABILITY_AVX2) || defined(CPU_CAPABILITY_AVX512)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

// CPU_CAPABILITY (DEFAULT, AVX2, AVX512) names the instruction set this copy is compiled for.
namespace brevitas_cpp::cpu::CPU_CAPABILITY {

template <typename T>
using Vec = at::vec::Vectorized<T>;

// Elements per task of at::parallel_for: large enough to amortise a thread wake-up.
constexpr int64_t kGrainSize = 32768;

// out[j] = op(in[j]) over n elements of dense memory, in parallel.
template <typename T, typename Op>
void unary_loop(const T* in, T* out, int64_t n, const Op& op) {
  constexpr int64_t V = Vec<T>::size();
  at::parallel_for(0, n, kGrainSize, [&](int64_t begin, int64_t end) {
    int64_t j = begin;
    for (; j + V <= end; j += V) op(Vec<T>::loadu(in + j)).store(out + j);
    if (j < end) op(Vec<T>::loadu(in + j, end - j)).store(out + j, end - j);
  });
}

// Splits [begin, end) of a ParamLayout's flat index into runs and calls
//   f(offset, length, k, strided)
// where strided == false: all `length` elements use parameter entry k, and
//       strided == true:  element offset + j uses parameter entry k + j.
template <typename F>
inline void for_each_run(const ParamLayout& L, int64_t begin, int64_t end, F&& f) {
  int64_t idx = begin;
  if (L.inner == 1 && L.K > 1) {
    while (idx < end) {
      const int64_t k = idx % L.K;
      const int64_t n = std::min(L.K - k, end - idx);
      f(idx, n, k, true);
      idx += n;
    }
  } else {
    while (idx < end) {
      const int64_t row = idx / L.inner;
      const int64_t i = idx - row * L.inner;
      const int64_t n = std::min(L.inner - i, end - idx);
      f(idx, n, row % L.K, false);
      idx += n;
    }
  }
}

// Loads the parameter vector for lane block starting at element j of a run.
template <typename T>
inline Vec<T> load_param(const T* p, int64_t k, int64_t j, bool strided, int64_t count) {
  return strided ? Vec<T>::loadu(p + k + j, count) : Vec<T>(p[k]);
}

// Calls body(offset, count) for every vector block of [0, n): full blocks, then one partial.
template <typename T, typename Body>
inline void for_each_block(int64_t n, const Body& body) {
  constexpr int64_t V = Vec<T>::size();
  int64_t j = 0;
  for (; j + V <= n; j += V) body(j, V);
  if (j < n) body(j, n - j);
}

// Deterministic parallel reduction: [0, n) is cut into chunks whose boundaries depend on n
// only (not on the thread count), each with its own accumulator block of `width` doubles,
// summed in chunk order afterwards. body(begin, end, acc) adds into acc.
template <typename Body>
std::vector<double> chunked_reduce(int64_t n, int64_t width, const Body& body) {
  constexpr int64_t kMaxChunks = 64;
  const int64_t chunks = std::max<int64_t>(1, std::min<int64_t>(kMaxChunks, (n + kGrainSize - 1) / kGrainSize));
  const int64_t chunk_size = (n + chunks - 1) / chunks;
  std::vector<double> partial(static_cast<size_t>(chunks * width), 0.0);
  at::parallel_for(0, chunks, 1, [&](int64_t cb, int64_t ce) {
    for (int64_t c = cb; c < ce; ++c) {
      const int64_t b = c * chunk_size;
      const int64_t e = std::min(n, b + chunk_size);
      if (b < e) body(b, e, partial.data() + c * width);
    }
  });
  std::vector<double> total(static_cast<size_t>(width), 0.0);
  for (int64_t c = 0; c < chunks; ++c)
    for (int64_t w = 0; w < width; ++w) total[w] += partial[c * width + w];
  return total;
}

// acc[j] += v[j] for the first `count` lanes, in double.
template <typename T>
C10_ALWAYS_INLINE void add_lanes_to(const Vec<T>& v, int64_t count, double* acc) {
  if constexpr (std::is_same_v<T, double>) {
    (Vec<double>::loadu(acc, count) + v).store(acc, count);
    return;
  }
#if defined(CPU_CAPABILITY_AVX512) || defined(CPU_CAPABILITY_AVX2)
  if constexpr (std::is_same_v<T, float>) {
    if (count == Vec<float>::size()) {  // widen each half to double and add: same sums, vectorized
#if defined(CPU_CAPABILITY_AVX512)
      const __m512 f = v;
      const __m512d lo = _mm512_cvtps_pd(_mm512_castps512_ps256(f));
      const __m512d hi = _mm512_cvtps_pd(_mm512_extractf32x8_ps(f, 1));
      _mm512_storeu_pd(acc, _mm512_add_pd(_mm512_loadu_pd(acc), lo));
      _mm512_storeu_pd(acc + 8, _mm512_add_pd(_mm512_loadu_pd(acc + 8), hi));
#else
      const __m256 f = v;
      const __m256d lo = _mm256_cvtps_pd(_mm256_castps256_ps128(f));
      const __m256d hi = _mm256_cvtps_pd(_mm256_extractf128_ps(f, 1));
      _mm256_storeu_pd(acc, _mm256_add_pd(_mm256_loadu_pd(acc), lo));
      _mm256_storeu_pd(acc + 4, _mm256_add_pd(_mm256_loadu_pd(acc + 4), hi));
#endif
      return;
    }
  }
#endif
  if constexpr (!std::is_same_v<T, double>) {
    T tmp[Vec<T>::size()];
    v.store(tmp, count);
    for (int64_t j = 0; j < count; ++j) acc[j] += static_cast<double>(tmp[j]);
  }
}

// Adds the lanes of v (first `count`) into acc[0..count) or, when !strided, all into acc[0].
template <typename T>
C10_ALWAYS_INLINE void accumulate_lanes(const Vec<T>& v, int64_t count, bool strided, double* acc) {
  if (strided) {
    add_lanes_to<T>(v, count, acc);
    return;
  }
  T tmp[Vec<T>::size()];
  v.store(tmp, count);
  double s = 0.0;
  for (int64_t j = 0; j < count; ++j) s += static_cast<double>(tmp[j]);
  acc[0] += s;
}

// Sums the contributions of one run (see for_each_run) into double accumulators: per lane
// into acc[j] for a strided run, all into acc[0] otherwise. Shared-parameter runs of float
// and double sum in vector lanes, flushed to double every kFlushBlocks blocks.
template <typename T>
class RunSum {
 public:
  RunSum(double* acc, bool strided) : acc_(acc), strided_(strided) {}
  RunSum(const RunSum&) = delete;
  RunSum& operator=(const RunSum&) = delete;
  ~RunSum() { flush(); }

  C10_ALWAYS_INLINE void add(int64_t j, const Vec<T>& v, int64_t count) {
    if (strided_ || !kVectorSum) {
      accumulate_lanes(v, count, strided_, acc_ + (strided_ ? j : 0));
      return;
    }
    lanes_ = lanes_ + (count == Vec<T>::size() ? v : Vec<T>::set(Vec<T>(T(0)), v, count));
    if (++blocks_ == kFlushBlocks) flush();
  }

  void flush() {
    if (blocks_ == 0) return;
    accumulate_lanes(lanes_, Vec<T>::size(), false, acc_);
    lanes_ = Vec<T>(T(0));
    blocks_ = 0;
  }

 private:
  static constexpr bool kVectorSum = std::is_same_v<T, float> || std::is_same_v<T, double>;
  static constexpr int kFlushBlocks = 128;
  double* acc_;
  bool strided_;
  Vec<T> lanes_ = Vec<T>(T(0));
  int blocks_ = 0;
};

// ---- bool masks <-> comparison results ------------------------------------------------
// A comparison result has all bits set in true lanes. Masks saved for backward are one bool
// byte per element; these convert between the two through a bit per lane.

// Bit j set where lane j of `flags` is set.
template <typename T>
inline uint64_t lane_bits(const Vec<T>& flags) {
#if defined(CPU_CAPABILITY_AVX512)
  if constexpr (std::is_same_v<T, float>) return _mm512_movepi32_mask(_mm512_castps_si512(flags));
  if constexpr (std::is_same_v<T, double>) return _mm512_movepi64_mask(_mm512_castpd_si512(flags));
#elif defined(CPU_CAPABILITY_AVX2)
  if constexpr (std::is_same_v<T, float>) return static_cast<uint32_t>(_mm256_movemask_ps(flags));
  if constexpr (std::is_same_v<T, double>) return static_cast<uint32_t>(_mm256_movemask_pd(flags));
#endif
  T tmp[Vec<T>::size()];
  flags.store(tmp);
  const auto* bytes = reinterpret_cast<const unsigned char*>(tmp);
  uint64_t bits = 0;
  for (int64_t j = 0; j < Vec<T>::size(); ++j) bits |= uint64_t(bytes[j * sizeof(T)] != 0) << j;
  return bits;
}

// A comparison result with lane j set where bit j of `bits` is.
template <typename T>
inline Vec<T> lanes_from_bits(uint64_t bits) {
#if defined(CPU_CAPABILITY_AVX512)
  if constexpr (std::is_same_v<T, float>) return _mm512_castsi512_ps(_mm512_movm_epi32(static_cast<__mmask16>(bits)));
  if constexpr (std::is_same_v<T, double>) return _mm512_castsi512_pd(_mm512_movm_epi64(static_cast<__mmask8>(bits)));
#elif defined(CPU_CAPABILITY_AVX2)
  if constexpr (std::is_same_v<T, float>) {
    const __m256i pow2 = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
    const __m256i b = _mm256_and_si256(_mm256_set1_epi32(static_cast<int>(bits)), pow2);
    return _mm256_castsi256_ps(_mm256_cmpeq_epi32(b, pow2));
  }
  if constexpr (std::is_same_v<T, double>) {
    const __m256i pow2 = _mm256_setr_epi64x(1, 2, 4, 8);
    const __m256i b = _mm256_and_si256(_mm256_set1_epi64x(static_cast<int64_t>(bits)), pow2);
    return _mm256_castsi256_pd(_mm256_cmpeq_epi64(b, pow2));
  }
#endif
  T tmp[Vec<T>::size()];
  for (int64_t j = 0; j < Vec<T>::size(); ++j) tmp[j] = (bits >> j) & 1 ? T(1) : T(0);
  return Vec<T>(Vec<T>::loadu(tmp) == Vec<T>(T(1)));
}

// Bytes 0/1 of bit j of `bits`, 8 lanes at a time (bytes_of_bits[b] holds the 8 bytes of b).
struct ByteTable {
  uint64_t bytes[256];
  constexpr ByteTable() : bytes() {
    for (int b = 0; b < 256; ++b)
      for (int j = 0; j < 8; ++j) bytes[b] |= uint64_t((b >> j) & 1) << (8 * j);
  }
};
inline constexpr ByteTable kBytesOfBits{};

// Writes `count` bools: out[j] = bit j of bits.
inline void store_bits_as_bools(uint64_t bits, bool* out, int64_t count) {
  int64_t j = 0;
  for (; j + 8 <= count; j += 8) std::memcpy(out + j, &kBytesOfBits.bytes[(bits >> j) & 0xff], 8);
  for (; j < count; ++j) out[j] = (bits >> j) & 1;
}

// Bit j set where in[j] is true, for `count` (<= 64) bools holding 0 or 1.
inline uint64_t load_bools_as_bits(const bool* in, int64_t count) {
  uint64_t bits = 0;
  int64_t j = 0;
  for (; j + 8 <= count; j += 8) {
    uint64_t b;
    std::memcpy(&b, in + j, 8);
    bits |= ((b * 0x0102040810204080ULL) >> 56) << j;  // gathers the low bit of each byte
  }
  for (; j < count; ++j) bits |= uint64_t(in[j]) << j;
  return bits;
}

// out[j] = lane j of `flags` is clear, for the first `count` lanes.
template <typename T>
inline void store_clear_lanes(const Vec<T>& flags, bool* out, int64_t count) {
  store_bits_as_bools(~lane_bits<T>(flags), out, count);
}

// A comparison-style mask (all bits set where in[j] is true) from `count` bools.
template <typename T>
inline Vec<T> load_bool_mask(const bool* in, int64_t count) {
  return lanes_from_bits<T>(load_bools_as_bits(in, count));
}

}  // namespace brevitas_cpp::cpu::CPU_CAPABILITY
