// Synchronous allocation: `gpu.alloc host_shared` (memory the host and the device both use;
// the lowering allows it only without async tokens, and passes a null stream), and a device
// `gpu.alloc` waited for at once (the lowering has no token-less form of it). The host fills
// the shared buffer, a kernel writes dev[i] = 3 * shared[i], a copy brings that back into the
// shared buffer, and the host copies it into the caller's output.
module attributes {gpu.container_module} {
  gpu.module @kernels {
    gpu.func @triple(%src: memref<?xi32>, %dst: memref<?xi32>, %n: index) kernel {
      %i = gpu.global_id x
      %in = arith.cmpi ult, %i, %n : index
      scf.if %in {
        %v = memref.load %src[%i] : memref<?xi32>
        %three = arith.constant 3 : i32
        %u = arith.muli %v, %three : i32
        memref.store %u, %dst[%i] : memref<?xi32>
      }
      gpu.return
    }
  }

  func.func @alloc(%host_out: memref<?xi32>) attributes {llvm.emit_c_interface} {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c256 = arith.constant 256 : index
    %c255 = arith.constant 255 : index
    %n = memref.dim %host_out, %c0 : memref<?xi32>
    %n255 = arith.addi %n, %c255 : index
    %blocks = arith.divui %n255, %c256 : index
    %shared = gpu.alloc host_shared (%n) : memref<?xi32>
    %t0 = gpu.wait async
    %dev, %t1 = gpu.alloc async [%t0] (%n) : memref<?xi32>
    gpu.wait [%t1]
    scf.for %i = %c0 to %n step %c1 {
      %v = arith.index_cast %i : index to i32
      memref.store %v, %shared[%i] : memref<?xi32>
    }
    %t2 = gpu.wait async
    %t3 = gpu.launch_func async [%t2] @kernels::@triple blocks in (%blocks, %c1, %c1) threads in (%c256, %c1, %c1) args(%shared : memref<?xi32>, %dev : memref<?xi32>, %n : index)
    %t4 = gpu.memcpy async [%t3] %shared, %dev : memref<?xi32>, memref<?xi32>
    gpu.wait [%t4]
    scf.for %i = %c0 to %n step %c1 {
      %v = memref.load %shared[%i] : memref<?xi32>
      memref.store %v, %host_out[%i] : memref<?xi32>
    }
    %t5 = gpu.wait async
    %t6 = gpu.dealloc async [%t5] %dev : memref<?xi32>
    %t7 = gpu.dealloc async [%t6] %shared : memref<?xi32>
    gpu.wait [%t7]
    return
  }
}
