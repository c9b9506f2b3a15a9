// The small MLP of hardware bench case 11 and clients/torch/mlp_graph.py: one kernel per
// layer, y = x W^T + b (ReLU on every layer but the last), compiled on the GPU machine
// (`nvcc -ptx`), so that our graph and PyTorch's captured graph replay the same kernels.

// Tile edge: a block computes a TILE x TILE piece of y from TILE-wide strips of x and W.
#define TILE 16

// x: rows x inputs, W: outputs x inputs (PyTorch's Linear layout), b: outputs, y: rows x
// outputs, all row-major float32. Grid: (outputs / TILE, rows / TILE) rounded up; block TILE x
// TILE.
extern "C" __global__ void linear_f32(const float *x, const float *w, const float *b, float *y,
                                      unsigned int rows, unsigned int inputs,
                                      unsigned int outputs, unsigned int relu) {
  __shared__ float xs[TILE][TILE];
  __shared__ float ws[TILE][TILE + 1];
  unsigned int row = blockIdx.y * TILE + threadIdx.y;
  unsigned int out = blockIdx.x * TILE + threadIdx.x;
  unsigned int w_row = blockIdx.x * TILE + threadIdx.y;
  float sum = 0.0f;
  for (unsigned int k = 0; k < inputs; k += TILE) {
    unsigned int column = k + threadIdx.x;
    xs[threadIdx.y][threadIdx.x] = (row < rows && column < inputs) ? x[row * inputs + column] : 0.0f;
    ws[threadIdx.y][threadIdx.x] =
        (w_row < outputs && column < inputs) ? w[w_row * inputs + column] : 0.0f;
    __syncthreads();
    for (unsigned int i = 0; i < TILE; ++i) {
      sum += xs[threadIdx.y][i] * ws[threadIdx.x][i];
    }
    __syncthreads();
  }
  if (row < rows && out < outputs) {
    float value = sum + b[out];
    y[row * outputs + out] = (relu && value < 0.0f) ? 0.0f : value;
  }
}
