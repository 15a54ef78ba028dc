/* kernels/attention_mma_layout.h — where the flash_mma kernels
 * (kernels/attention_mma.cu) point each lane's ldmatrix address, and which
 * accumulator elements form an A fragment: plain C, so that
 * tests/test_attention_mma_layout.c checks these very functions against
 * the PTX ISA's definitions of ldmatrix and mma.m16n8k16 on the CPU.
 *
 * Tiles are 16-bit elements, row-major with `lds` elements per row
 * (DMAX + 8: 16 bytes of padding).  An ldmatrix .x4 reads four 8x8
 * matrices; lane l gives the address of row l % 8 of matrix l / 8. */
#ifndef ULPSCOPE_KERNELS_ATTENTION_MMA_LAYOUT_H
#define ULPSCOPE_KERNELS_ATTENTION_MMA_LAYOUT_H

#ifdef __CUDACC__
#define AML_HD __host__ __device__
#else
#define AML_HD
#endif

/* A operand (16x16, rows m, columns k) from rows [r0, r0 + 16), columns
 * [c0, c0 + 16) of a tile stored [m][k]: matrices (rows +0, cols +0), (+8, +0),
 * (+0, +8), (+8, +8) are registers a0..a3. */
AML_HD static inline int aml_a_offset(int lds, int r0, int c0, int lane)
{
    return (r0 + (lane & 15)) * lds + c0 + (lane >> 4) * 8;
}

/* B operands (16x8, k x n) of the two n-tiles [n0, n0 + 8) and [n0 + 8, n0 + 16),
 * k in [k0, k0 + 16), from a tile stored [n][k] (plain ldmatrix): matrices
 * (n +0, k +0), (n +0, k +8), (n +8, k +0), (n +8, k +8) are b0, b1 of the
 * first n-tile and b0, b1 of the second. */
AML_HD static inline int aml_bn_offset(int lds, int n0, int k0, int lane)
{
    return (n0 + (lane & 7) + ((lane >> 4) << 3)) * lds + k0 + ((lane >> 3) & 1) * 8;
}

/* The same B operands from a tile stored [k][n] (ldmatrix .trans): matrices
 * (k +0, n +0), (k +8, n +0), (k +0, n +8), (k +8, n +8). */
AML_HD static inline int aml_bk_offset(int lds, int k0, int n0, int lane)
{
    return (k0 + (lane & 7) + ((lane >> 3) & 1) * 8) * lds + n0 + (lane >> 4) * 8;
}

/* Register r (0..3), half e (0 low, 1 high) of the A fragment of columns
 * [16 c, 16 c + 16) is accumulator element aml_acc_elem(r, e) of n-tile
 * 2 c + aml_acc_tile(r): the d layout of two adjacent m16n8 tiles is the a
 * layout of one m16k16 tile. */
AML_HD static inline int aml_acc_tile(int r) { return r >> 1; }
AML_HD static inline int aml_acc_elem(int r, int e) { return 2 * (r & 1) + e; }

#endif
