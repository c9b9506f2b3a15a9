// A two-layer perceptron step for IREE (`cargo xtask iree` compiles it for CUDA and for the
// CPU): two matmuls, a bias and ReLU between them, and a row sum, a few dispatches that make
// IREE's CUDA HAL create streams, events and stream-ordered allocations.
//
// Its inputs and expected outputs are `mlp.flags` and `mlp.expected` (iree-run-module flag
// files): x = 1, w1 = 0.5, w2 = 0.25 (splats) and b1 = -16, -80 alternating, so
//   h = relu(x @ w1 + b1) = relu(128 * 0.5 + b1) = 48, 0 alternating (ReLU clamps every other
//   column), y = h @ w2 = 32 * 48 * 0.25 = 384 everywhere, row_sum(y) = 16 * 384 = 6144.
func.func @mlp(%x: tensor<32x128xf32>, %w1: tensor<128x64xf32>, %b1: tensor<64xf32>,
               %w2: tensor<64x16xf32>) -> (tensor<32x16xf32>, tensor<32xf32>) {
  %zero = arith.constant 0.0 : f32
  %h_init = tensor.empty() : tensor<32x64xf32>
  %h_zero = linalg.fill ins(%zero : f32) outs(%h_init : tensor<32x64xf32>) -> tensor<32x64xf32>
  %xw = linalg.matmul ins(%x, %w1 : tensor<32x128xf32>, tensor<128x64xf32>)
                      outs(%h_zero : tensor<32x64xf32>) -> tensor<32x64xf32>
  %h = linalg.generic {
      indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (j)>,
                       affine_map<(i, j) -> (i, j)>],
      iterator_types = ["parallel", "parallel"]}
      ins(%xw, %b1 : tensor<32x64xf32>, tensor<64xf32>) outs(%h_init : tensor<32x64xf32>) {
    ^bb0(%v: f32, %bias: f32, %unused: f32):
      %sum = arith.addf %v, %bias : f32
      %relu = arith.maximumf %sum, %zero : f32
      linalg.yield %relu : f32
  } -> tensor<32x64xf32>
  %y_init = tensor.empty() : tensor<32x16xf32>
  %y_zero = linalg.fill ins(%zero : f32) outs(%y_init : tensor<32x16xf32>) -> tensor<32x16xf32>
  %y = linalg.matmul ins(%h, %w2 : tensor<32x64xf32>, tensor<64x16xf32>)
                     outs(%y_zero : tensor<32x16xf32>) -> tensor<32x16xf32>
  %s_init = tensor.empty() : tensor<32xf32>
  %s_zero = linalg.fill ins(%zero : f32) outs(%s_init : tensor<32xf32>) -> tensor<32xf32>
  %s = linalg.generic {
      indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i)>],
      iterator_types = ["parallel", "reduction"]}
      ins(%y : tensor<32x16xf32>) outs(%s_zero : tensor<32xf32>) {
    ^bb0(%v: f32, %acc: f32):
      %next = arith.addf %v, %acc : f32
      linalg.yield %next : f32
  } -> tensor<32xf32>
  return %y, %s : tensor<32x16xf32>, tensor<32xf32>
}
