// Host registration of a memref and of a subview inside it (a nested range: CUDA's
// cuMemHostRegister refuses it as already registered), a kernel that doubles the subview's
// elements in place through the host memory itself, and both unregistered again.
// With data[i] = i on entry: data[i] = 2 * i for i in [offset, offset + len), else i.
module attributes {gpu.container_module} {
  gpu.module @kernels {
    gpu.func @double(%data: memref<?xi32, strided<[1], offset: ?>>, %n: index) kernel {
      %i = gpu.global_id x
      %in = arith.cmpi ult, %i, %n : index
      scf.if %in {
        %v = memref.load %data[%i] : memref<?xi32, strided<[1], offset: ?>>
        %r = arith.addi %v, %v : i32
        memref.store %r, %data[%i] : memref<?xi32, strided<[1], offset: ?>>
      }
      gpu.return
    }
  }

  func.func @host_register(%data: memref<?xi32>, %offset: index, %len: index) attributes {llvm.emit_c_interface} {
    %c1 = arith.constant 1 : index
    %c256 = arith.constant 256 : index
    %c255 = arith.constant 255 : index
    %whole = memref.cast %data : memref<?xi32> to memref<*xi32>
    gpu.host_register %whole : memref<*xi32>
    %part = memref.subview %data[%offset] [%len] [1] : memref<?xi32> to memref<?xi32, strided<[1], offset: ?>>
    %part_unranked = memref.cast %part : memref<?xi32, strided<[1], offset: ?>> to memref<*xi32>
    gpu.host_register %part_unranked : memref<*xi32>
    %len255 = arith.addi %len, %c255 : index
    %blocks = arith.divui %len255, %c256 : index
    %t0 = gpu.wait async
    %t1 = gpu.launch_func async [%t0] @kernels::@double blocks in (%blocks, %c1, %c1) threads in (%c256, %c1, %c1) args(%part : memref<?xi32, strided<[1], offset: ?>>, %len : index)
    gpu.wait [%t1]
    gpu.host_unregister %part_unranked : memref<*xi32>
    gpu.host_unregister %whole : memref<*xi32>
    return
  }
}
