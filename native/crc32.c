/* CRC-32 (IEEE, as zlib.crc32) without zlib: carry-less multiplication folding (PCLMULQDQ) on x86-64
 * CPUs that have it, for runs of 64 bytes or more; slicing-by-8 tables for the rest and elsewhere.
 *
 * Measured per call from C (noisy shared machine): at 1 KiB, slicing-by-8 ~390 ns, zlib 1.2.13's
 * braided crc32 ~290 ns, folding ~36 ns; at 36 bytes (the chain CRC) slicing-by-8 ~21 ns, zlib ~75 ns.
 * Folding is the method of Intel's paper "Fast CRC Computation for Generic Polynomials Using PCLMULQDQ",
 * with its multipliers computed here at start and the last lane finished through the tables. */
#include "crc32.h"

#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define QL_FOLDING 1
#include <immintrin.h>
#endif

static uint32_t table[8][256];
static int folding;

#ifdef QL_FOLDING
/* Multipliers that carry a 128-bit lane forward, made once by ql_crc32_init: the low 64-bit half by
 * x^(d+32), the high half by x^(d-32), for d = 512 bits (four lanes ahead) and d = 128 (one lane). */
static uint64_t far_k[2] __attribute__((aligned(16)));
static uint64_t near_k[2] __attribute__((aligned(16)));

/* x^n mod P, bit-reflected as the lanes are, and shifted left once (carry-less products of reflected
 * operands come out one bit short). */
static uint64_t fold_constant(unsigned n)
{
    uint64_t r = 1;
    uint32_t v, out = 0;
    while (n--) {
        r <<= 1;
        if (r >> 32)
            r ^= 0x104C11DB7ull;
    }
    v = (uint32_t)r;
    for (int i = 0; i < 32; i++)
        out |= ((v >> i) & 1u) << (31 - i);
    return (uint64_t)out << 1;
}
#endif

void ql_crc32_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        table[0][i] = c;
    }
    for (int i = 0; i < 256; i++)
        for (int k = 1; k < 8; k++)
            table[k][i] = (table[k - 1][i] >> 8) ^ table[0][table[k - 1][i] & 0xff];
#ifdef QL_FOLDING
    __builtin_cpu_init();
    folding = __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
    far_k[0] = fold_constant(512 + 32);
    far_k[1] = fold_constant(512 - 32);
    near_k[0] = fold_constant(128 + 32);
    near_k[1] = fold_constant(128 - 32);
#endif
}

int ql_crc32_folding(void)
{
    return folding;
}

/* The inner state (not inverted) carried over n bytes, eight at a time. */
static uint32_t by_tables(uint32_t crc, const unsigned char *p, size_t n)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    /* The 8-byte step reads words little-endian: on other hosts every byte goes the slow way. */
    while (n >= 8) {
        uint32_t lo, hi;
        memcpy(&lo, p, 4);
        memcpy(&hi, p + 4, 4);
        lo ^= crc;
        crc = table[7][lo & 0xff] ^ table[6][(lo >> 8) & 0xff] ^ table[5][(lo >> 16) & 0xff] ^ table[4][lo >> 24]
            ^ table[3][hi & 0xff] ^ table[2][(hi >> 8) & 0xff] ^ table[1][(hi >> 16) & 0xff] ^ table[0][hi >> 24];
        p += 8;
        n -= 8;
    }
#endif
    while (n--)
        crc = table[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
    return crc;
}

#ifdef QL_FOLDING
__attribute__((target("sse4.1,pclmul"))) static inline __m128i fold_lane(__m128i lane, __m128i k, __m128i next)
{
    __m128i low = _mm_clmulepi64_si128(lane, k, 0x00);
    __m128i high = _mm_clmulepi64_si128(lane, k, 0x11);
    return _mm_xor_si128(_mm_xor_si128(low, high), next);
}

/* The inner state carried over n bytes, n >= 64 and a multiple of 16: four lanes fold 64 bytes a step,
 * then fold into one; that lane's 16 bytes, which leave the same remainder as everything before them,
 * finish through the tables. */
__attribute__((target("sse4.1,pclmul"))) static uint32_t by_folding(uint32_t crc, const unsigned char *p, size_t n)
{
    const __m128i far = _mm_load_si128((const __m128i *)far_k);
    const __m128i near = _mm_load_si128((const __m128i *)near_k);
    unsigned char last[16];
    __m128i lane[4], acc;
    size_t off;

    for (int i = 0; i < 4; i++)
        lane[i] = _mm_loadu_si128((const __m128i *)(p + 16 * i));
    lane[0] = _mm_xor_si128(lane[0], _mm_cvtsi32_si128((int)crc));
    for (off = 64; n - off >= 64; off += 64)
        for (int i = 0; i < 4; i++)
            lane[i] = fold_lane(lane[i], far, _mm_loadu_si128((const __m128i *)(p + off + 16 * i)));
    acc = lane[0];
    for (int i = 1; i < 4; i++)
        acc = fold_lane(acc, near, lane[i]);
    for (; off < n; off += 16)
        acc = fold_lane(acc, near, _mm_loadu_si128((const __m128i *)(p + off)));
    _mm_storeu_si128((__m128i *)last, acc);
    return by_tables(0, last, 16);
}
#endif

uint32_t ql_crc32_tables(uint32_t crc, const unsigned char *p, size_t n)
{
    return ~by_tables(~crc, p, n);
}

uint32_t ql_crc32(uint32_t crc, const unsigned char *p, size_t n)
{
    crc = ~crc;
#ifdef QL_FOLDING
    if (folding && n >= 64) {
        size_t whole = n & ~(size_t)15;
        crc = by_folding(crc, p, whole);
        p += whole;
        n -= whole;
    }
#endif
    return ~by_tables(crc, p, n);
}
