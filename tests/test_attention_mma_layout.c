/* tests/test_attention_mma_layout.c — the flash_mma kernels' fragment
 * addressing (kernels/attention_mma_layout.h) against the PTX ISA, on the
 * CPU.  An emulated ldmatrix .x4 (PTX ISA, "Warp-level matrix load
 * instruction: ldmatrix": lane l gives the address of row l % 8 of matrix
 * l / 8; register m of lane l receives elements (l / 4, 2 (l % 4)) and
 * (l / 4, 2 (l % 4) + 1) of matrix m, the first in the low half; .trans:
 * elements (2 (l % 4), l / 4) and (2 (l % 4) + 1, l / 4)) reads a tile whose
 * every element holds its own coordinates, through the kernels' addresses;
 * each register must then hold the elements the mma.m16n8k16 fragment
 * layout (PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating point
 * type": a_i row g + 8 [i % 4 >= 2], column 2t + i % 2 + 8 [i >= 4]; b_i row
 * 2t + i % 2 + 8 [i >= 2], column g; c_i row g + 8 [i >= 2], column 2t + i % 2;
 * g = lane / 4, t = lane % 4) asks for, for every operand the kernels load,
 * at every offset they use.  Also: the accumulator-to-A mapping, and that
 * the 8 rows of each 8x8 matrix fall in 8 distinct 16-byte bank groups (no
 * bank conflicts) with the padded row strides.  Twins: a transposed address
 * map, and an unpadded stride for the conflict check, must fail. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "kernels/attention_mma_layout.h"

/* An element's tag: its coordinates in the stored tile (row < 256, col < 256). */
static uint16_t tag(int row, int col) { return (uint16_t)(row << 8 | col); }

enum { MAX_ROWS = 128, MAX_LDS = 136 };
static uint16_t tile[MAX_ROWS * MAX_LDS];

static void fill_tile(int rows, int lds)
{
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < lds; c++) tile[r * lds + c] = tag(r, c);
}

/* ldmatrix .x4 (.trans) from per-lane element offsets: out[lane][m] = (lo, hi). */
static void ldmatrix_x4(const int offset[32], int trans, uint16_t out[32][4][2])
{
    for (int m = 0; m < 4; m++)
        for (int l = 0; l < 32; l++)
            for (int e = 0; e < 2; e++) {
                const int row = trans ? 2 * (l % 4) + e : l / 4, col = trans ? l / 4 : 2 * (l % 4) + e;
                out[l][m][e] = tile[offset[8 * m + row] + col];
            }
}

typedef int (*offset_fn)(int lds, int a, int b, int lane);

/* A operand from a tile stored [m][k]: register r element e of lane l is
 * (row r0 + g + 8 (r & 1), col c0 + 2t + e + 8 (r >> 1)). */
static int check_a(offset_fn fn, int lds, int r0, int c0)
{
    int offset[32], bad = 0;
    uint16_t got[32][4][2];
    for (int l = 0; l < 32; l++) offset[l] = fn(lds, r0, c0, l);
    ldmatrix_x4(offset, 0, got);
    for (int l = 0; l < 32; l++)
        for (int r = 0; r < 4; r++)
            for (int e = 0; e < 2; e++) {
                const int i = 2 * r + e, g = l / 4, t = l % 4;
                const int row = g + ((i % 4) >= 2 ? 8 : 0), col = 2 * t + i % 2 + (i >= 4 ? 8 : 0);
                bad += got[l][r][e] != tag(r0 + row, c0 + col);
            }
    return bad;
}

/* B operands of n-tiles n0, n0 + 8 (registers 2 nt + r), element e of b_r:
 * k = k0 + 2t + e + 8 r, n = n0 + 8 nt + g; stored [n][k] (trans = 0) or [k][n]. */
static int check_b(offset_fn fn, int trans, int lds, int n0, int k0)
{
    int offset[32], bad = 0;
    uint16_t got[32][4][2];
    for (int l = 0; l < 32; l++) offset[l] = trans ? fn(lds, k0, n0, l) : fn(lds, n0, k0, l);
    ldmatrix_x4(offset, trans, got);
    for (int l = 0; l < 32; l++)
        for (int nt = 0; nt < 2; nt++)
            for (int r = 0; r < 2; r++)
                for (int e = 0; e < 2; e++) {
                    const int i = 2 * r + e, g = l / 4, t = l % 4;
                    const int k = k0 + 2 * t + i % 2 + (i >= 2 ? 8 : 0), n = n0 + 8 * nt + g;
                    bad += got[l][2 * nt + r][e] != (trans ? tag(k, n) : tag(n, k));
                }
    return bad;
}

/* The offsets a twin uses: rows and columns of the A map swapped. */
static int swapped_a_offset(int lds, int r0, int c0, int lane) { return (r0 + (lane >> 4) * 8) * lds + c0 + (lane & 15); }

static int bn_offset(int lds, int n0, int k0, int lane) { return aml_bn_offset(lds, n0, k0, lane); }
static int bk_offset(int lds, int k0, int n0, int lane) { return aml_bk_offset(lds, k0, n0, lane); }
static int a_offset(int lds, int r0, int c0, int lane) { return aml_a_offset(lds, r0, c0, lane); }

/* Every origin the kernels use: rows 16 w (w < 4) or 16 c (c < 4) of 64-row
 * tiles, 16-column chunks up to DMAX, for DMAX 64 and 128. */
static void test_fragments_match_ptx(void **state)
{
    (void)state;
    static const int dmax[] = {64, 128};
    int cases = 0;
    for (int di = 0; di < 2; di++) {
        const int lds = dmax[di] + 8;
        fill_tile(64, lds);
        for (int r0 = 0; r0 < 64; r0 += 16)
            for (int c0 = 0; c0 < dmax[di]; c0 += 16) {
                if (check_a(a_offset, lds, r0, c0)) fail_msg("A operand: lds %d rows %d cols %d", lds, r0, c0);
                if (check_b(bn_offset, 0, lds, r0, c0)) fail_msg("B [n][k]: lds %d n0 %d k0 %d", lds, r0, c0);
                if (check_b(bk_offset, 1, lds, c0, r0)) fail_msg("B [k][n] trans: lds %d k0 %d n0 %d", lds, r0, c0);
                cases += 4;
            }
    }
    print_message("%d operand loads match the mma.m16n8k16 fragments\n", cases);
}

static void test_twin_swapped_map_fails(void **state)
{
    (void)state;
    fill_tile(64, 72);
    assert_true(check_a(swapped_a_offset, 72, 16, 16) > 0);
    assert_true(check_b(bn_offset, 1, 72, 0, 0) > 0); /* a [n][k] map read with .trans */
}

/* d of n-tiles (2c, 2c + 1) -> a of k-chunk c: element (row, k) must be the
 * accumulator element at the same (row, column). */
static void test_acc_to_a(void **state)
{
    (void)state;
    for (int l = 0; l < 32; l++)
        for (int r = 0; r < 4; r++)
            for (int e = 0; e < 2; e++) {
                const int i = 2 * r + e, g = l / 4, t = l % 4;
                const int a_row = g + ((i % 4) >= 2 ? 8 : 0), a_col = 2 * t + i % 2 + (i >= 4 ? 8 : 0);
                const int tile_n = aml_acc_tile(r), ci = aml_acc_elem(r, e);
                const int c_row = g + (ci >= 2 ? 8 : 0), c_col = 8 * tile_n + 2 * t + ci % 2;
                assert_int_equal(a_row, c_row);
                assert_int_equal(a_col, c_col);
            }
}

/* Distinct 16-byte groups (mod 8: 32 banks of 4 bytes) among the 8 rows each
 * matrix reads. */
static int conflicts(offset_fn fn, int lds, int a, int b)
{
    int bad = 0;
    for (int m = 0; m < 4; m++) {
        int seen = 0;
        for (int r = 0; r < 8; r++) {
            const int group = (fn(lds, a, b, 8 * m + r) * 2 / 16) % 8;
            if (seen & (1 << group)) bad++;
            seen |= 1 << group;
        }
    }
    return bad;
}

static void test_no_bank_conflicts(void **state)
{
    (void)state;
    static const int dmax[] = {64, 128};
    for (int di = 0; di < 2; di++) {
        const int lds = dmax[di] + 8;
        for (int a = 0; a < 64; a += 16)
            for (int b = 0; b < dmax[di]; b += 16) {
                assert_int_equal(conflicts(a_offset, lds, a, b), 0);
                assert_int_equal(conflicts(bn_offset, lds, a, b), 0);
                assert_int_equal(conflicts(bk_offset, lds, a, b), 0);
            }
        /* twin: without the padding every row of a matrix hits the same group */
        assert_true(conflicts(a_offset, dmax[di], 0, 0) > 0);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fragments_match_ptx),
        cmocka_unit_test(test_twin_swapped_map_fails),
        cmocka_unit_test(test_acc_to_a),
        cmocka_unit_test(test_no_bank_conflicts),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
