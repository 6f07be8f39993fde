#define grid_size_x 8
#define grid_size_y 64
#define grid_size_z 1
#define block_size_x 8
#define block_size_y 1
#define block_size_z 1
#define TILE_K 8
#define UNROLL 3
#define PIN 0
#define kernel_tuner 1
#line 1

#if UNROLL == 3
#error "UNROLL 3 is not supported by this kernel"
#endif
__kernel
#if PIN
__attribute__((reqd_work_group_size(8, 8, 1)))
#endif
void gemm(__global float *C, __global const float *A, __global const float *B, const int n) {
    const int tx = get_local_id(0), ty = get_local_id(1);
    const int col = get_group_id(0) * block_size_x + tx;
    const int row = get_group_id(1) * block_size_y + ty;
    __local float As[block_size_y][TILE_K];
    __local float Bs[TILE_K][block_size_x];
    float acc = 0.0f;
    for (int k0 = 0; k0 < n; k0 += TILE_K) {
        for (int i = tx; i < TILE_K; i += block_size_x)
            As[ty][i] = (row < n && k0 + i < n) ? A[row * n + k0 + i] : 0.0f;
        for (int i = ty; i < TILE_K; i += block_size_y)
            Bs[i][tx] = (col < n && k0 + i < n) ? B[(k0 + i) * n + col] : 0.0f;
        barrier(CLK_LOCAL_MEM_FENCE);
#if UNROLL == 2
        for (int k = 0; k < TILE_K; k += 2)
            acc += As[ty][k] * Bs[k][tx] + As[ty][k + 1] * Bs[k + 1][tx];
#else
        for (int k = 0; k < TILE_K; k++)
            acc += As[ty][k] * Bs[k][tx];
#endif
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (row < n && col < n)
        C[row * n + col] = acc;
}
