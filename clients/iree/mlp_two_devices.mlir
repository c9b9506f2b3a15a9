// The step of mlp.mlir split over two IREE devices: the first layer on `device_a`, its
// activations moved to `device_b` for the second layer and the row sum, the results moved back.
// `cargo xtask iree` compiles it with device_a and device_b both CUDA devices; run it with
// `--device=cuda://0 --device=cuda://1` (or the same GPU twice). Same inputs and outputs as
// mlp.mlir (mlp.flags, mlp.expected).
func.func @mlp_two_devices(
    %x: tensor<32x128xf32> {iree.abi.affinity = #hal.device.promise<@device_a>},
    %w1: tensor<128x64xf32> {iree.abi.affinity = #hal.device.promise<@device_a>},
    %b1: tensor<64xf32> {iree.abi.affinity = #hal.device.promise<@device_a>},
    %w2: tensor<64x16xf32> {iree.abi.affinity = #hal.device.promise<@device_a>})
    -> (tensor<32x16xf32> {iree.abi.affinity = #hal.device.promise<@device_a>},
        tensor<32xf32> {iree.abi.affinity = #hal.device.promise<@device_a>}) {
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
  %h_b = flow.tensor.transfer %h : tensor<32x64xf32> to #hal.device.promise<@device_b>
  %w2_b = flow.tensor.transfer %w2 : tensor<64x16xf32> to #hal.device.promise<@device_b>
  %y_init = tensor.empty() : tensor<32x16xf32>
  %y_zero = linalg.fill ins(%zero : f32) outs(%y_init : tensor<32x16xf32>) -> tensor<32x16xf32>
  %y = linalg.matmul ins(%h_b, %w2_b : tensor<32x64xf32>, tensor<64x16xf32>)
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
  %y_a = flow.tensor.transfer %y : tensor<32x16xf32> to #hal.device.promise<@device_a>
  %s_a = flow.tensor.transfer %s : tensor<32xf32> to #hal.device.promise<@device_a>
  return %y_a, %s_a : tensor<32x16xf32>, tensor<32xf32>
}
