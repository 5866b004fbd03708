/* The golden model's element-wise loops (graphs/native.py): the same IEEE operations, in the
 * same order, as the numpy steps they replace (graphs/golden_plan.py), one pass instead of
 * three to six. Built with -ffp-contract=off and without -ffast-math: every result is that
 * of the numpy code bit for bit (floor, nearbyint and comparisons are exact; the one add and
 * the one multiply are rounded once, as numpy rounds them; the clamp keeps the value where
 * it equals a bound, as np.clip does, so a -0.0 stays -0.0 as there). */
#include <math.h>
#include <stdint.h>
#ifdef __AVX2__
#include <immintrin.h>
#endif

/* Dense/Conv epilogue, in place on a C-contiguous (rows, n) GEMM result:
 * y = clamp(round(y + b[j]), lo, hi); mode 0: no rounding, 1: floor, 2: rint (half to
 * even, the default rounding mode, as np.rint); b may be NULL (no add). One fused loop per
 * case, so that the compiler vectorises it. */
#define CLAMP(v, lo, hi) ((v) < (lo) ? (lo) : ((v) > (hi) ? (hi) : (v)))
#define EPI_LOOP(T, EXPR)                                                              \
    for (int64_t i = 0; i < rows; i++) {                                               \
        T *restrict r = y + i * n;                                                     \
        for (int64_t j = 0; j < n; j++) {                                              \
            T v = EXPR;                                                                \
            r[j] = CLAMP(v, lo, hi);                                                   \
        }                                                                              \
    }
#define EPILOGUE(T, NAME)                                                              \
    void NAME(T *restrict y, const T *restrict b, int64_t rows, int64_t n, int mode,   \
              T lo, T hi) {                                                            \
        if (b) {                                                                       \
            if (mode == 1) { EPI_LOOP(T, floor(r[j] + b[j])) }                         \
            else if (mode == 2) { EPI_LOOP(T, rint(r[j] + b[j])) }                \
            else { EPI_LOOP(T, r[j] + b[j]) }                                          \
        } else {                                                                       \
            if (mode == 1) { EPI_LOOP(T, floor(r[j])) }                                \
            else if (mode == 2) { EPI_LOOP(T, rint(r[j])) }                       \
            else { EPI_LOOP(T, r[j]) }                                                 \
        }                                                                              \
    }
EPILOGUE(double, mc_epilogue_f64)
EPILOGUE(float, mc_epilogue_f32)

/* Quantization of float inputs to codes held as floats (golden_plan.Plan.quantize):
 * y = x * scale (in the output's type), then mode 0: rint, 1: floor, 2: floor plus one
 * where y - floor(y) >= 1/2 (round half up); clamp to [lo, hi]. Returns nonzero where an
 * input is NaN or infinite (x - x is then NaN, never 0; the caller refuses the batch). */
#define QUANTIZE(TI, TO, NAME)                                                         \
    int NAME(const TI *restrict x, TO *restrict out, int64_t n, TO scale, int mode,    \
             TO lo, TO hi) {                                                           \
        int bad = 0;                                                                   \
        for (int64_t i = 0; i < n; i++) bad |= (x[i] - x[i]) != (TI)0;                 \
        if (mode == 0) {                                                               \
            for (int64_t i = 0; i < n; i++) {                                          \
                TO r = rint((TO)x[i] * scale);                                         \
                out[i] = CLAMP(r, lo, hi);                                             \
            }                                                                          \
        } else if (mode == 1) {                                                        \
            for (int64_t i = 0; i < n; i++) {                                          \
                TO r = floor((TO)x[i] * scale);                                        \
                out[i] = CLAMP(r, lo, hi);                                             \
            }                                                                          \
        } else {                                                                       \
            for (int64_t i = 0; i < n; i++) {                                          \
                TO y = (TO)x[i] * scale;                                               \
                TO r = floor(y);                                                       \
                r = (y - r >= (TO)0.5) ? r + (TO)1 : r;                                \
                out[i] = CLAMP(r, lo, hi);                                             \
            }                                                                          \
        }                                                                              \
        return bad;                                                                    \
    }
QUANTIZE(float, float, mc_quantize_f32_f32)
QUANTIZE(float, double, mc_quantize_f32_f64)
QUANTIZE(double, double, mc_quantize_f64_f64)

/* Requantization of one int64 code (mc_requantize_sat_i64 below, element by element). */
static inline int64_t mc_req1(int64_t v, int s, int mode, int64_t below_mask, int64_t lo,
                              int64_t hi) {
    int64_t fl = v >> s;
    if (mode != 0) {
        int64_t half = (v >> (s - 1)) & 1;
        if (mode == 1) {
            fl += half;
        } else if (half && ((v & below_mask) != 0 || (fl & 1))) {
            fl += 1;
        }
    }
    fl = fl < lo ? lo : fl;
    return fl > hi ? hi : fl;
}

/* Softmax of one row of integer codes (reference.softmax): e = exp_t[index(x - max)],
 * s = sum e, out = e * rec_t[index(s)] (int64, before the requantization; the chain's
 * variant, _req, requantizes each value as it is formed: 0 < rs < 63, mode and bounds as
 * mc_requantize_sat_i64); index(v) = (clamp(v, lo, hi) - lo) >> shift. */
#define SOFTMAX(T, NAME)                                                               \
    static inline void NAME##_core(const T *x, int64_t *out, int64_t rows, int64_t n,   \
              const int64_t *exp_t, int64_t e_lo, int64_t e_hi, int64_t e_sh,          \
              const int64_t *rec_t, int64_t r_lo, int64_t r_hi, int64_t r_sh, int rs,   \
              int rmode, int64_t qlo, int64_t qhi) {                                   \
        const int64_t below = rs > 1 ? (((int64_t)1 << (rs - 1)) - 1) : 0;            \
        for (int64_t i = 0; i < rows; i++) {                                           \
            const T *r = x + i * n;                                                    \
            int64_t *o = out + i * n;                                                  \
            int64_t m = (int64_t)r[0];                                                 \
            for (int64_t j = 1; j < n; j++) {                                          \
                int64_t v = (int64_t)r[j];                                             \
                m = v > m ? v : m;                                                     \
            }                                                                          \
            int64_t s = 0;                                                             \
            for (int64_t j = 0; j < n; j++) {                                          \
                int64_t q = (int64_t)r[j] - m;                                         \
                q = q < e_lo ? e_lo : (q > e_hi ? e_hi : q);                           \
                o[j] = exp_t[(q - e_lo) >> e_sh];                                      \
                s += o[j];                                                             \
            }                                                                          \
            s = s < r_lo ? r_lo : (s > r_hi ? r_hi : s);                               \
            int64_t rc = rec_t[(s - r_lo) >> r_sh];                                    \
            if (rs)                                                                    \
                for (int64_t j = 0; j < n; j++)                                        \
                    o[j] = mc_req1(o[j] * rc, rs, rmode, below, qlo, qhi);             \
            else                                                                       \
                for (int64_t j = 0; j < n; j++) o[j] = o[j] * rc;                      \
        }                                                                              \
    }                                                                                  \
    void NAME(const T *x, int64_t *out, int64_t rows, int64_t n, const int64_t *exp_t,  \
              int64_t e_lo, int64_t e_hi, int64_t e_sh, const int64_t *rec_t,           \
              int64_t r_lo, int64_t r_hi, int64_t r_sh) {                               \
        NAME##_core(x, out, rows, n, exp_t, e_lo, e_hi, e_sh, rec_t, r_lo, r_hi, r_sh,  \
                    0, 0, 0, 0);                                                       \
    }
SOFTMAX(double, mc_softmax_f64)
SOFTMAX(float, mc_softmax_f32)
SOFTMAX(int64_t, mc_softmax_i64)

/* Sum of two activations on the output's grid (golden_plan's Add/Sub): v = a * ka + b * kb
 * in double (ka, kb exact powers of two, signed; each product and the sum exact under 2**53,
 * which the plan checks), then mode 0: none, 1: floor (TRN), 2: floor(v + 1/2) (RND),
 * 3: rint (RND_CONV); clamp to [lo, hi]. */
#define ADD(TA, TB, NAME)                                                              \
    void NAME(const TA *restrict a, const TB *restrict b, double *restrict y, int64_t n, \
              double ka, double kb, int mode, double lo, double hi) {                  \
        if (mode == 1) {                                                               \
            for (int64_t i = 0; i < n; i++) {                                          \
                double v = floor((double)a[i] * ka + (double)b[i] * kb);               \
                y[i] = CLAMP(v, lo, hi);                                               \
            }                                                                          \
        } else if (mode == 2) {                                                        \
            for (int64_t i = 0; i < n; i++) {                                          \
                double v = floor(((double)a[i] * ka + (double)b[i] * kb) + 0.5);       \
                y[i] = CLAMP(v, lo, hi);                                               \
            }                                                                          \
        } else if (mode == 3) {                                                        \
            for (int64_t i = 0; i < n; i++) {                                          \
                double v = rint((double)a[i] * ka + (double)b[i] * kb);                \
                y[i] = CLAMP(v, lo, hi);                                               \
            }                                                                          \
        } else {                                                                       \
            for (int64_t i = 0; i < n; i++) {                                          \
                double v = (double)a[i] * ka + (double)b[i] * kb;                      \
                y[i] = CLAMP(v, lo, hi);                                               \
            }                                                                          \
        }                                                                              \
    }
ADD(double, double, mc_add_f64_f64)
ADD(double, float, mc_add_f64_f32)
ADD(double, int64_t, mc_add_f64_i64)
ADD(float, double, mc_add_f32_f64)
ADD(float, float, mc_add_f32_f32)
ADD(float, int64_t, mc_add_f32_i64)
ADD(int64_t, double, mc_add_i64_f64)
ADD(int64_t, float, mc_add_i64_f32)
ADD(int64_t, int64_t, mc_add_i64_i64)

/* im2col of a channels-last 2-D convolution (group 1), zero padding read as zeros: rows for
 * output rows [oh0, oh1) of `frames` frames of x (H, W, C), each row the window in (kh, kw,
 * c) order converted to the GEMM's type (exact: codes within its bound). */
#define IM2COL(TI, TO, NAME)                                                           \
    void NAME(const TI *restrict x, TO *restrict o, int64_t frames, int64_t H,         \
              int64_t W, int64_t C, int64_t OW, int64_t KH, int64_t KW, int64_t SH,    \
              int64_t SW, int64_t PT, int64_t PL, int64_t oh0, int64_t oh1) {          \
        const int64_t run = KW * C; /* one kernel row of a window */                  \
        for (int64_t f = 0; f < frames; f++) {                                         \
            const TI *xf = x + f * H * W * C;                                          \
            for (int64_t oh = oh0; oh < oh1; oh++) {                                   \
                for (int64_t ow = 0; ow < OW; ow++) {                                  \
                    const int64_t iw0 = ow * SW - PL;                                  \
                    /* the kernel columns inside the frame: [k0, k1) */                \
                    int64_t k0 = iw0 < 0 ? -iw0 : 0;                                   \
                    int64_t k1 = W - iw0 < KW ? W - iw0 : KW;                          \
                    if (k1 < k0) k1 = k0;                                              \
                    for (int64_t kh = 0; kh < KH; kh++, o += run) {                    \
                        const int64_t ih = oh * SH + kh - PT;                          \
                        if (ih < 0 || ih >= H) {                                       \
                            for (int64_t j = 0; j < run; j++) o[j] = (TO)0;            \
                            continue;                                                  \
                        }                                                              \
                        const TI *xr = xf + ih * W * C; /* input row ih */             \
                        for (int64_t j = 0; j < k0 * C; j++) o[j] = (TO)0;             \
                        for (int64_t j = k0 * C; j < k1 * C; j++)                      \
                            o[j] = (TO)xr[iw0 * C + j]; /* >= 0 from k0 on */           \
                        for (int64_t j = k1 * C; j < run; j++) o[j] = (TO)0;           \
                    }                                                                  \
                }                                                                      \
            }                                                                          \
        }                                                                              \
    }
IM2COL(float, float, mc_im2col_f32_f32)
IM2COL(float, double, mc_im2col_f32_f64)
IM2COL(double, float, mc_im2col_f64_f32)
IM2COL(double, double, mc_im2col_f64_f64)
IM2COL(int64_t, float, mc_im2col_i64_f32)
IM2COL(int64_t, double, mc_im2col_i64_f64)
/* straight into the int16 GEMM's input (golden_plan: an even window length only) */
IM2COL(float, int16_t, mc_im2col_f32_i16)
IM2COL(double, int16_t, mc_im2col_f64_i16)
IM2COL(int64_t, int16_t, mc_im2col_i64_i16)

/* MultiThreshold (reference.threshold): out[i] = tab[r][count of thresholds <= x[i]], r = i
 * mod rows (a per-channel quantizer over the last axis, one row per element, or rows = 1);
 * ts: each row's K >= 1 thresholds sorted between two sentinels (INT64_MIN, ..., INT64_MAX:
 * K + 2 per row), tab: base plus the prefix sums of their steps (K + 1 per row); inv[r]:
 * (K - 1) / (t[K-1] - t[0]) or 0. A quantizer's thresholds are nearly evenly spaced, so the
 * count g is first guessed from that spacing and accepted where t[g-1] <= x < t[g] (the
 * sentinels make that one branch-free test, and it is exact); else a binary search. */
#define THRESHOLD(T, NAME)                                                             \
    void NAME(const T *x, int64_t *out, int64_t n, int64_t rows, const int64_t *ts,     \
              int64_t K, const int64_t *tab, const double *inv) {                      \
        for (int64_t i = 0, r = 0; i < n; i++) {                                       \
            const int64_t v = (int64_t)x[i];                                           \
            const int64_t *s = ts + r * (K + 2); /* s[g] = t[g-1], s[0] = INT64_MIN */ \
            double e = ((double)v - (double)s[1]) * inv[r] + 1.0;                      \
            e = e < 0.0 ? 0.0 : e;                                                     \
            e = e > (double)K ? (double)K : e;                                         \
            int64_t g = (int64_t)e;                                                    \
            if (__builtin_expect(!(s[g] <= v && v < s[g + 1]), 0)) {                   \
                const int64_t *t = s + 1, *b = t;                                      \
                int64_t len = K;                                                       \
                while (len > 1) {                                                      \
                    const int64_t half = len >> 1;                                     \
                    b = b[half] <= v ? b + half : b;                                   \
                    len -= half;                                                       \
                }                                                                      \
                g = (b - t) + (*b <= v);                                               \
            }                                                                          \
            out[i] = tab[r * (K + 1) + g];                                             \
            if (++r == rows) r = 0;                                                    \
        }                                                                              \
    }
/* The same for an input type of few codes: its whole map, lut[r][v - lo] (span codes). */
#define THRESHOLD_LUT(T, NAME)                                                         \
    void NAME(const T *x, int64_t *out, int64_t n, int64_t rows, const int64_t *lut,    \
              int64_t lo, int64_t span) {                                              \
        for (int64_t i = 0, r = 0; i < n; i++) {                                       \
            int64_t d = (int64_t)x[i] - lo; /* within the type: 0 <= d < span */       \
            d = d < 0 ? 0 : (d >= span ? span - 1 : d);                                \
            out[i] = lut[r * span + d];                                                \
            if (++r == rows) r = 0;                                                    \
        }                                                                              \
    }
THRESHOLD_LUT(double, mc_threshold_lut_f64)
THRESHOLD_LUT(float, mc_threshold_lut_f32)
THRESHOLD_LUT(int64_t, mc_threshold_lut_i64)
THRESHOLD(double, mc_threshold_f64)
THRESHOLD(float, mc_threshold_f32)
THRESHOLD(int64_t, mc_threshold_i64)

/* Depthwise convolution (group = C, one input channel per group, M outputs per channel),
 * channels-last, zero padding skipped: y (frames, OH, OW, C*M) = the sum over the taps of
 * x * w, w as (KH*KW, C*M) (output o = c*M + j reads channel c), in T: exact, the plan's
 * bound (arithmetic.choose) covers every partial sum in any order; the epilogue follows as
 * for a GEMM. Where numpy formed (C, K) windows and C small batched products. */
#define DWCONV(TI, T, NAME)                                                            \
    void NAME(const TI *restrict x, T *restrict y, const T *restrict w, int64_t frames, \
              int64_t H, int64_t W, int64_t C, int64_t M, int64_t OH, int64_t OW,       \
              int64_t KH, int64_t KW, int64_t SH, int64_t SW, int64_t PT, int64_t PL) { \
        const int64_t CO = C * M;                                                      \
        for (int64_t f = 0; f < frames; f++)                                           \
            for (int64_t oh = 0; oh < OH; oh++)                                        \
                for (int64_t ow = 0; ow < OW; ow++) {                                  \
                    T *restrict yo = y + ((f * OH + oh) * OW + ow) * CO;               \
                    for (int64_t o = 0; o < CO; o++) yo[o] = (T)0;                     \
                    for (int64_t kh = 0; kh < KH; kh++) {                              \
                        const int64_t ih = oh * SH + kh - PT;                          \
                        if (ih < 0 || ih >= H) continue;                               \
                        for (int64_t kw = 0; kw < KW; kw++) {                          \
                            const int64_t iw = ow * SW + kw - PL;                      \
                            if (iw < 0 || iw >= W) continue;                           \
                            const TI *restrict xp = x + ((f * H + ih) * W + iw) * C;   \
                            const T *restrict wt = w + (kh * KW + kw) * CO;            \
                            if (M == 1)                                                \
                                for (int64_t c = 0; c < C; c++)                        \
                                    yo[c] += (T)xp[c] * wt[c];                         \
                            else                                                       \
                                for (int64_t o = 0; o < CO; o++)                       \
                                    yo[o] += (T)xp[o / M] * wt[o];                     \
                        }                                                              \
                    }                                                                  \
                }                                                                      \
    }
DWCONV(float, float, mc_dwconv_f32_f32)
DWCONV(double, float, mc_dwconv_f64_f32)
DWCONV(int64_t, float, mc_dwconv_i64_f32)
DWCONV(float, double, mc_dwconv_f32_f64)
DWCONV(double, double, mc_dwconv_f64_f64)
DWCONV(int64_t, double, mc_dwconv_i64_f64)

/* Requantization of int64 codes in place (fixed.requantize for a saturating type and
 * 0 < s < 63): drop s bits with mode 0: floor (TRN), 1: + the first dropped bit (RND),
 * 2: half to even (RND_CONV); clamp to [lo, hi]. */
void mc_requantize_sat_i64(int64_t *q, int64_t n, int s, int mode, int64_t lo, int64_t hi) {
    const int64_t below_mask = s > 1 ? (((int64_t)1 << (s - 1)) - 1) : 0;
    for (int64_t i = 0; i < n; i++) q[i] = mc_req1(q[i], s, mode, below_mask, lo, hi);
}

/* An int16 x int16 GEMM with exact int32 sums (the chain's GEMM_I16): y (rows, n) = x (rows,
 * kp) @ w, w given in pairs of rows, wp[q][j][0..1] = w[2q][j], w[2q+1][j] (kp even; a zero
 * row pads an odd k). The plan uses it only where every partial sum is provably under 2**31
 * in magnitude (arithmetic.Arithmetic.gemm_bits <= 31), so each pair's sum and every running
 * total is exact (vpmaddwd's one overflow, 2 * (-32768)**2, is above that bound). A
 * float64 GEMM does one multiply-add per lane of four; this does two per lane of eight: on a
 * 16-bit 640x128 layer ~2x OpenBLAS's dgemm (bench/golden.py). Without AVX2: plain loops. */
#ifdef __AVX2__
#define I16_BLOCK(NV)                                                                  \
    {                                                                                  \
        __m256i a0[NV], a1[NV];                                                        \
        for (int t = 0; t < NV; t++) a0[t] = a1[t] = _mm256_setzero_si256();           \
        for (int64_t q = 0; q < kh; q++) {                                             \
            const __m256i b0 = _mm256_set1_epi32(x0[q]), b1 = _mm256_set1_epi32(x1[q]); \
            const __m256i *wq = (const __m256i *)(wp + (q * n + j) * 2);               \
            for (int t = 0; t < NV; t++) {                                             \
                const __m256i wv = _mm256_loadu_si256(wq + t);                         \
                a0[t] = _mm256_add_epi32(a0[t], _mm256_madd_epi16(b0, wv));            \
                a1[t] = _mm256_add_epi32(a1[t], _mm256_madd_epi16(b1, wv));            \
            }                                                                          \
        }                                                                              \
        for (int t = 0; t < NV; t++) {                                                 \
            _mm256_storeu_si256((__m256i *)(y + i * n + j + 8 * t), a0[t]);            \
            _mm256_storeu_si256((__m256i *)(y + (i + 1) * n + j + 8 * t), a1[t]);      \
        }                                                                              \
    }
#endif

#if defined(__AVX512F__) && defined(__AVX512VNNI__)
/* AVX-512 VNNI: vpdpwssd multiplies the pairs and adds into int32 in one instruction (32
 * products per instruction against 16 in two for AVX2); four rows share each weight load. */
#define I16_BLOCK512(NV, R)                                                            \
    {                                                                                  \
        __m512i a[R][NV];                                                              \
        for (int r = 0; r < R; r++)                                                    \
            for (int t = 0; t < NV; t++) a[r][t] = _mm512_setzero_si512();             \
        for (int64_t q = 0; q < kh; q++) {                                             \
            __m512i b[R];                                                              \
            for (int r = 0; r < R; r++) b[r] = _mm512_set1_epi32(xq[r][q]);            \
            const int16_t *wq = wp + (q * n + j) * 2;                                  \
            for (int t = 0; t < NV; t++) {                                             \
                const __m512i wv = _mm512_loadu_si512((const void *)(wq + 32 * t));    \
                for (int r = 0; r < R; r++)                                            \
                    a[r][t] = _mm512_dpwssd_epi32(a[r][t], b[r], wv);                  \
            }                                                                          \
        }                                                                              \
        for (int r = 0; r < R; r++)                                                    \
            for (int t = 0; t < NV; t++)                                               \
                _mm512_storeu_si512((void *)(y + (i + r) * n + j + 16 * t), a[r][t]);  \
    }
/* the last n - j < 16 columns of R rows: masked weight loads and stores */
#define I16_TAIL512(R)                                                                 \
    {                                                                                  \
        const __mmask16 m16 = (__mmask16)((1u << (n - j)) - 1);                        \
        const __mmask32 m32 = (__mmask32)((1ull << (2 * (n - j))) - 1);                \
        __m512i a[R];                                                                  \
        for (int r = 0; r < R; r++) a[r] = _mm512_setzero_si512();                     \
        for (int64_t q = 0; q < kh; q++) {                                             \
            const __m512i wv = _mm512_maskz_loadu_epi16(m32, wp + (q * n + j) * 2);    \
            for (int r = 0; r < R; r++)                                                \
                a[r] = _mm512_dpwssd_epi32(a[r], _mm512_set1_epi32(xq[r][q]), wv);     \
        }                                                                              \
        for (int r = 0; r < R; r++)                                                    \
            _mm512_mask_storeu_epi32(y + (i + r) * n + j, m16, a[r]);                  \
    }
#endif

/* row i's pairs of x as int32s (the broadcast operand of vpmaddwd / vpdpwssd) */
static inline void mc_pairs(const int16_t *x, int64_t i, int64_t kp, int32_t *out) {
    for (int64_t q = 0; q < kp / 2; q++)
        out[q] = (int32_t)((uint32_t)(uint16_t)x[i * kp + 2 * q] |
                           ((uint32_t)(uint16_t)x[i * kp + 2 * q + 1] << 16));
}

static void mc_gemm_i16(const int16_t *x, const int16_t *wp, int32_t *y, int64_t rows,
                        int64_t kp, int64_t n) {
    const int64_t kh = kp / 2;
    int64_t i = 0;
#if defined(__AVX512F__) && defined(__AVX512VNNI__)
    /* narrow layers (a 16- or 32-channel convolution): eight rows share each weight load */
    for (; n < 64 && i + 8 <= rows; i += 8) {
        int32_t xq[8][kh > 0 ? kh : 1];
        for (int r = 0; r < 8; r++) mc_pairs(x, i + r, kp, xq[r]);
        int64_t j = 0;
        for (; j + 16 <= n; j += 16) I16_BLOCK512(1, 8)
        if (j < n) I16_TAIL512(8)
    }
    for (; i + 4 <= rows; i += 4) {
        int32_t xq[4][kh > 0 ? kh : 1];
        for (int r = 0; r < 4; r++) mc_pairs(x, i + r, kp, xq[r]);
        int64_t j = 0;
        for (; j + 64 <= n; j += 64) I16_BLOCK512(4, 4)
        for (; j + 16 <= n; j += 16) I16_BLOCK512(1, 4)
        if (j < n) I16_TAIL512(4)
    }
#endif
#ifdef __AVX2__
    for (; i + 2 <= rows; i += 2) {
        int32_t x0[kh > 0 ? kh : 1], x1[kh > 0 ? kh : 1];
        mc_pairs(x, i, kp, x0);
        mc_pairs(x, i + 1, kp, x1);
        int64_t j = 0;
        for (; j + 64 <= n; j += 64) I16_BLOCK(8)
        for (; j + 8 <= n; j += 8) I16_BLOCK(1)
        for (; j < n; j++) {
            int32_t s0 = 0, s1 = 0;
            for (int64_t q = 0; q < kh; q++) {
                const int16_t *wv = wp + (q * n + j) * 2;
                s0 += x[i * kp + 2 * q] * wv[0] + x[i * kp + 2 * q + 1] * wv[1];
                s1 += x[(i + 1) * kp + 2 * q] * wv[0] + x[(i + 1) * kp + 2 * q + 1] * wv[1];
            }
            y[i * n + j] = s0;
            y[(i + 1) * n + j] = s1;
        }
    }
#endif
    for (; i < rows; i++) {
        const int16_t *xr = x + i * kp;
        int32_t *yr = y + i * n;
        for (int64_t j = 0; j < n; j++) yr[j] = 0;
        for (int64_t q = 0; q < kh; q++) {
            const int16_t *wq = wp + q * n * 2;
            const int32_t a = xr[2 * q], b = xr[2 * q + 1];
            for (int64_t j = 0; j < n; j++) yr[j] += a * wq[2 * j] + b * wq[2 * j + 1];
        }
    }
}

/* which kernel mc_gemm_i16 was built with: 0 plain loops, 1 AVX2, 2 AVX-512 VNNI */
int mc_i16_level(void) {
#if defined(__AVX512F__) && defined(__AVX512VNNI__)
    return 2;
#elif defined(__AVX2__)
    return 1;
#else
    return 0;
#endif
}

/* The codes (held as T) of a (rows, k) input as int16 rows of kp (exact: the plan checked
 * they fit), a zero in the padding column. */
#define TO_I16(T)                                                                      \
    { const T *s = (const T *)o->x;                                                    \
      for (int64_t r = 0; r < rows; r++) {                                             \
          for (int64_t c = 0; c < o->k; c++) z[r * kp + c] = (int16_t)s[r * o->k + c]; \
          if (kp != o->k) z[r * kp + o->k] = 0;                                        \
      } }

/* The epilogue of an int32 sum: y = clamp(round(acc * 2**e + b), lo, hi) in double (the
 * product exact: |acc| < 2**31 and a power of two), as mc_epilogue_f64 on the float64 GEMM's
 * exact result; stored as TO (a float32 layer's values are integers under 2**24 once
 * scaled, the bound that chose float32: exact, and its sum with b as exact as in float32). */
#define EPI_I32_LOOP(TO, EXPR)                                                         \
    for (int64_t i = 0; i < rows; i++) {                                               \
        const int32_t *restrict a = acc + i * n;                                       \
        TO *restrict r = y + i * n;                                                    \
        for (int64_t j = 0; j < n; j++) {                                              \
            double v = EXPR;                                                           \
            r[j] = (TO)CLAMP(v, lo, hi);                                               \
        }                                                                              \
    }
#define EPI_I32(TO, NAME)                                                              \
    static void NAME(const int32_t *restrict acc, TO *restrict y, const TO *restrict b, \
                     int64_t rows, int64_t n, int mode, double scale, double lo,       \
                     double hi) {                                                      \
        if (b) {                                                                       \
            if (mode == 1) { EPI_I32_LOOP(TO, floor((double)a[j] * scale + (double)b[j])) } \
            else if (mode == 2) { EPI_I32_LOOP(TO, rint((double)a[j] * scale + (double)b[j])) } \
            else { EPI_I32_LOOP(TO, (double)a[j] * scale + (double)b[j]) }             \
        } else {                                                                       \
            if (mode == 1) { EPI_I32_LOOP(TO, floor((double)a[j] * scale)) }           \
            else if (mode == 2) { EPI_I32_LOOP(TO, rint((double)a[j] * scale)) }       \
            else { EPI_I32_LOOP(TO, (double)a[j] * scale) }                            \
        }                                                                              \
    }
EPI_I32(double, mc_epilogue_i32_f64)
EPI_I32(float, mc_epilogue_i32_f32)

/* A run of golden steps in one call (golden_plan's native chain): a Python step costs 5-10 us
 * of interpreter and ctypes work around a few us of arithmetic on a small layer, so an MLP of
 * small layers spent most of its time between the products. Each op is what its step does:
 * the GEMM is the CBLAS call numpy's matmul makes (row-major, no transpose, alpha 1, beta 0,
 * the same library: graphs/native.py finds numpy's own), then the epilogue above; a cast
 * converts codes between the exact forms they are held in; the Softmax is the loop above
 * and its requantization; the quantization of float inputs is the loop above (QUANTIZE: a
 * NaN or an infinity makes mc_program return nonzero before any other op runs). */
enum { MC_OP_GEMM = 1, MC_OP_CAST = 2, MC_OP_SOFTMAX = 3, MC_OP_QUANTIZE = 4,
       MC_OP_GEMM_I16 = 5 };
enum { MC_F64 = 0, MC_F32 = 1, MC_I64 = 2, MC_I16 = 3 };
enum { MC_ROW_MAJOR = 101, MC_NO_TRANS = 111 };

typedef struct {
    int64_t kind, dtype, dtype2; /* GEMM: its type; CAST: from, to; SOFTMAX: the input's */
    int64_t k, n, mode;          /* fan-in, columns (elements per row), rounding mode */
    void *x, *y;
    const void *w, *b;
    double lo, hi;               /* the epilogue's or the quantization's clamp */
    double scale;                /* the quantization's 2**frac; GEMM_I16: the sum's 2**e */
    void *z, *acc;               /* GEMM_I16: the int16 input (rows, k rounded up to even)
                                    and the int32 sums (rows, n) */
    const int64_t *exp_t, *rec_t;
    int64_t e_lo, e_hi, e_sh, r_lo, r_hi, r_sh;
    int64_t s_out, req_mode, q_lo, q_hi; /* the Softmax's requantization (s_out 0: none) */
} mc_op;

typedef void (*mc_dgemm64_t)(int, int, int, int64_t, int64_t, int64_t, double, const double *,
                             int64_t, const double *, int64_t, double, double *, int64_t);
typedef void (*mc_sgemm64_t)(int, int, int, int64_t, int64_t, int64_t, float, const float *,
                             int64_t, const float *, int64_t, float, float *, int64_t);
typedef void (*mc_dgemm32_t)(int, int, int, int, int, int, double, const double *, int,
                             const double *, int, double, double *, int);
typedef void (*mc_sgemm32_t)(int, int, int, int, int, int, float, const float *, int,
                             const float *, int, float, float *, int);

#define CAST_LOOP(TI, TO)                                                              \
    { const TI *s = (const TI *)o->x; TO *d = (TO *)o->y;                              \
      for (int64_t i = 0; i < cnt; i++) d[i] = (TO)s[i]; }

/* ints64: the CBLAS takes 64-bit sizes (an ILP64 OpenBLAS, numpy's own); else 32-bit. */
static int mc_ops(const mc_op *ops, int64_t nops, int64_t rows, void *dgemm, void *sgemm,
                  int ints64);

/* The BLAS numpy calls (graphs/native.py finds it): its GEMMs, whether their sizes are 64-bit,
 * and OpenBLAS's openblas_get/set_num_threads (NULL for another BLAS). */
typedef struct {
    void *dgemm, *sgemm;
    int64_t ints64;
    void *get_nt, *set_nt;
} mc_blas;

/* one_thread: the BLAS runs this chain's products on one thread (graphs/threads.py decides),
 * its setting restored after. Returns nonzero where a quantized input is NaN or infinite. */
int mc_program(const mc_op *ops, int64_t nops, int64_t rows, const mc_blas *blas,
               int one_thread) {
    if (rows <= 0) return 0;
    int saved = 0;
    if (one_thread && blas->get_nt && blas->set_nt) {
        saved = ((int (*)(void))blas->get_nt)();
        if (saved > 1) ((void (*)(int))blas->set_nt)(1);
    }
    int bad = mc_ops(ops, nops, rows, blas->dgemm, blas->sgemm, (int)blas->ints64);
    if (saved > 1) ((void (*)(int))blas->set_nt)(saved);
    return bad;
}

static int mc_ops(const mc_op *ops, int64_t nops, int64_t rows, void *dgemm, void *sgemm,
                  int ints64) {
    for (int64_t i = 0; i < nops; i++) {
        const mc_op *o = ops + i;
        if (o->kind == MC_OP_QUANTIZE) {
            const int64_t cnt = rows * o->n;
            int bad;
            if (o->dtype == MC_F32 && o->dtype2 == MC_F32)
                bad = mc_quantize_f32_f32((const float *)o->x, (float *)o->y, cnt,
                                          (float)o->scale, (int)o->mode, (float)o->lo,
                                          (float)o->hi);
            else if (o->dtype == MC_F32)
                bad = mc_quantize_f32_f64((const float *)o->x, (double *)o->y, cnt, o->scale,
                                          (int)o->mode, o->lo, o->hi);
            else
                bad = mc_quantize_f64_f64((const double *)o->x, (double *)o->y, cnt, o->scale,
                                          (int)o->mode, o->lo, o->hi);
            if (bad) return 1;
        } else if (o->kind == MC_OP_GEMM) {
            if (o->dtype == MC_F64) {
                if (ints64)
                    ((mc_dgemm64_t)dgemm)(MC_ROW_MAJOR, MC_NO_TRANS, MC_NO_TRANS, rows, o->n,
                                          o->k, 1.0, (const double *)o->x, o->k,
                                          (const double *)o->w, o->n, 0.0, (double *)o->y,
                                          o->n);
                else
                    ((mc_dgemm32_t)dgemm)(MC_ROW_MAJOR, MC_NO_TRANS, MC_NO_TRANS, (int)rows,
                                          (int)o->n, (int)o->k, 1.0, (const double *)o->x,
                                          (int)o->k, (const double *)o->w, (int)o->n, 0.0,
                                          (double *)o->y, (int)o->n);
                mc_epilogue_f64((double *)o->y, (const double *)o->b, rows, o->n,
                                (int)o->mode, o->lo, o->hi);
            } else {
                if (ints64)
                    ((mc_sgemm64_t)sgemm)(MC_ROW_MAJOR, MC_NO_TRANS, MC_NO_TRANS, rows, o->n,
                                          o->k, 1.0f, (const float *)o->x, o->k,
                                          (const float *)o->w, o->n, 0.0f, (float *)o->y,
                                          o->n);
                else
                    ((mc_sgemm32_t)sgemm)(MC_ROW_MAJOR, MC_NO_TRANS, MC_NO_TRANS, (int)rows,
                                          (int)o->n, (int)o->k, 1.0f, (const float *)o->x,
                                          (int)o->k, (const float *)o->w, (int)o->n, 0.0f,
                                          (float *)o->y, (int)o->n);
                mc_epilogue_f32((float *)o->y, (const float *)o->b, rows, o->n, (int)o->mode,
                                (float)o->lo, (float)o->hi);
            }
        } else if (o->kind == MC_OP_GEMM_I16) {
            int16_t *z = (int16_t *)o->z;
            const int64_t kp = o->k + (o->k & 1);
            if (o->dtype == MC_I16) z = (int16_t *)o->x; /* already int16 rows of even k */
            else if (o->dtype == MC_F64) TO_I16(double)
            else if (o->dtype == MC_F32) TO_I16(float)
            else TO_I16(int64_t)
            mc_gemm_i16(z, (const int16_t *)o->w, (int32_t *)o->acc, rows, kp, o->n);
            if (o->dtype2 == MC_F32)
                mc_epilogue_i32_f32((const int32_t *)o->acc, (float *)o->y,
                                    (const float *)o->b, rows, o->n, (int)o->mode, o->scale,
                                    o->lo, o->hi);
            else
                mc_epilogue_i32_f64((const int32_t *)o->acc, (double *)o->y,
                                    (const double *)o->b, rows, o->n, (int)o->mode, o->scale,
                                    o->lo, o->hi);
        } else if (o->kind == MC_OP_CAST) {
            const int64_t cnt = rows * o->n;
            if (o->dtype == MC_F64 && o->dtype2 == MC_F32) CAST_LOOP(double, float)
            else if (o->dtype == MC_F32 && o->dtype2 == MC_F64) CAST_LOOP(float, double)
            else if (o->dtype == MC_I64 && o->dtype2 == MC_F64) CAST_LOOP(int64_t, double)
            else if (o->dtype == MC_I64 && o->dtype2 == MC_F32) CAST_LOOP(int64_t, float)
            else if (o->dtype == MC_F64 && o->dtype2 == MC_I64) CAST_LOOP(double, int64_t)
            else if (o->dtype == MC_F32 && o->dtype2 == MC_I64) CAST_LOOP(float, int64_t)
        } else if (o->kind == MC_OP_SOFTMAX) {
            int64_t *e = (int64_t *)o->y;
            const int rs = (int)o->s_out, rm = (int)o->req_mode;
            if (o->dtype == MC_F64)
                mc_softmax_f64_core((const double *)o->x, e, rows, o->n, o->exp_t, o->e_lo,
                                    o->e_hi, o->e_sh, o->rec_t, o->r_lo, o->r_hi, o->r_sh, rs,
                                    rm, o->q_lo, o->q_hi);
            else if (o->dtype == MC_F32)
                mc_softmax_f32_core((const float *)o->x, e, rows, o->n, o->exp_t, o->e_lo,
                                    o->e_hi, o->e_sh, o->rec_t, o->r_lo, o->r_hi, o->r_sh, rs,
                                    rm, o->q_lo, o->q_hi);
            else
                mc_softmax_i64_core((const int64_t *)o->x, e, rows, o->n, o->exp_t, o->e_lo,
                                    o->e_hi, o->e_sh, o->rec_t, o->r_lo, o->r_hi, o->r_sh, rs,
                                    rm, o->q_lo, o->q_hi);
        }
    }
    return 0;
}
