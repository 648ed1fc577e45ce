// Two SGEMM kernels in the earlier kernel benchmarker's convention:
// res[N x M] = a[N x K] @ b[K x M], row-major, one thread per output element.

#define TILE 16

// One thread computes one output element straight from global memory.
__global__ void matmul_naive(const float *a, const float *b, float *res, int N, int M, int K) {
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (row < N && col < M) {
        float value = 0.0f;
        for (int k = 0; k < K; k++) {
            value += a[row * K + k] * b[k * M + col];
        }
        res[row * M + col] = value;
    }
}

// Shared-memory tiling: each 16 x 16 block stages a tile of a and of b per step of K.
// Needs blockDim = (TILE, TILE, 1).
__global__ void matmul_tiled(const float *__restrict__ a, const float *__restrict__ b,
                             float *__restrict__ res, int N, int M, int K) {
    __shared__ float tile_a[TILE][TILE];
    __shared__ float tile_b[TILE][TILE];
    int row = blockIdx.y * TILE + threadIdx.y;
    int col = blockIdx.x * TILE + threadIdx.x;
    float value = 0.0f;
    for (int t = 0; t < (K + TILE - 1) / TILE; t++) {
        int ka = t * TILE + threadIdx.x;
        int kb = t * TILE + threadIdx.y;
        tile_a[threadIdx.y][threadIdx.x] = (row < N && ka < K) ? a[row * K + ka] : 0.0f;
        tile_b[threadIdx.y][threadIdx.x] = (kb < K && col < M) ? b[kb * M + col] : 0.0f;
        __syncthreads();
        for (int k = 0; k < TILE; k++) {
            value += tile_a[threadIdx.y][k] * tile_b[k][threadIdx.x];
        }
        __syncthreads();
    }
    if (row < N && col < M) {
        res[row * M + col] = value;
    }
}
