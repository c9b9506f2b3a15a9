// Fork/join (spec/clients.md): three stream-ordered allocations, a copy in, two kernels that
// both depend on the copy (a fork), a join, a kernel after the join, a copy out, three frees.
// out[i] = (2 * in[i]) * (in[i] + 1)
module attributes {gpu.container_module} {
  gpu.module @kernels {
    gpu.func @twice(%src: memref<?xf32>, %dst: memref<?xf32>, %n: index) kernel {
      %i = gpu.global_id x
      %in = arith.cmpi ult, %i, %n : index
      scf.if %in {
        %v = memref.load %src[%i] : memref<?xf32>
        %r = arith.addf %v, %v : f32
        memref.store %r, %dst[%i] : memref<?xf32>
      }
      gpu.return
    }
    gpu.func @plus_one(%src: memref<?xf32>, %dst: memref<?xf32>, %n: index) kernel {
      %i = gpu.global_id x
      %in = arith.cmpi ult, %i, %n : index
      scf.if %in {
        %one = arith.constant 1.0 : f32
        %v = memref.load %src[%i] : memref<?xf32>
        %r = arith.addf %v, %one : f32
        memref.store %r, %dst[%i] : memref<?xf32>
      }
      gpu.return
    }
    gpu.func @multiply(%a: memref<?xf32>, %b: memref<?xf32>, %dst: memref<?xf32>, %n: index) kernel {
      %i = gpu.global_id x
      %in = arith.cmpi ult, %i, %n : index
      scf.if %in {
        %x = memref.load %a[%i] : memref<?xf32>
        %y = memref.load %b[%i] : memref<?xf32>
        %r = arith.mulf %x, %y : f32
        memref.store %r, %dst[%i] : memref<?xf32>
      }
      gpu.return
    }
  }

  func.func @forkjoin(%host_in: memref<?xf32>, %host_out: memref<?xf32>) attributes {llvm.emit_c_interface} {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c256 = arith.constant 256 : index
    %c255 = arith.constant 255 : index
    %n = memref.dim %host_in, %c0 : memref<?xf32>
    %n255 = arith.addi %n, %c255 : index
    %blocks = arith.divui %n255, %c256 : index
    %t0 = gpu.wait async
    %x, %t1 = gpu.alloc async [%t0] (%n) : memref<?xf32>
    %y, %t2 = gpu.alloc async [%t1] (%n) : memref<?xf32>
    %z, %t3 = gpu.alloc async [%t2] (%n) : memref<?xf32>
    %t4 = gpu.memcpy async [%t3] %x, %host_in : memref<?xf32>, memref<?xf32>
    %t5 = gpu.launch_func async [%t4] @kernels::@twice blocks in (%blocks, %c1, %c1) threads in (%c256, %c1, %c1) args(%x : memref<?xf32>, %y : memref<?xf32>, %n : index)
    %t6 = gpu.launch_func async [%t4] @kernels::@plus_one blocks in (%blocks, %c1, %c1) threads in (%c256, %c1, %c1) args(%x : memref<?xf32>, %z : memref<?xf32>, %n : index)
    %t7 = gpu.wait async [%t5, %t6]
    %t8 = gpu.launch_func async [%t7] @kernels::@multiply blocks in (%blocks, %c1, %c1) threads in (%c256, %c1, %c1) args(%y : memref<?xf32>, %z : memref<?xf32>, %x : memref<?xf32>, %n : index)
    %t9 = gpu.memcpy async [%t8] %host_out, %x : memref<?xf32>, memref<?xf32>
    %t10 = gpu.dealloc async [%t9] %x : memref<?xf32>
    %t11 = gpu.dealloc async [%t10] %y : memref<?xf32>
    %t12 = gpu.dealloc async [%t11] %z : memref<?xf32>
    gpu.wait [%t12]
    return
  }
}
