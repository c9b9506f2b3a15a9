// A kernel with 64 KiB of dynamic workgroup (shared) memory, above the 48 KiB a block gets
// without opting in: each block of 1,024 threads reverses 16,384 words through it.
// out[b * 16384 + j] = in[b * 16384 + 16383 - j].
module attributes {gpu.container_module} {
  gpu.module @kernels {
    gpu.func @reverse_blocks(%src: memref<?xi32>, %dst: memref<?xi32>) kernel {
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %c4 = arith.constant 4 : index
      %words = arith.constant 16384 : index
      %last = arith.constant 16383 : index
      %bytes = gpu.dynamic_shared_memory : memref<?xi8, #gpu.address_space<workgroup>>
      %tile = memref.view %bytes[%c0][] : memref<?xi8, #gpu.address_space<workgroup>> to memref<16384xi32, #gpu.address_space<workgroup>>
      %tid = gpu.thread_id x
      %threads = gpu.block_dim x
      %block = gpu.block_id x
      %base = arith.muli %block, %words : index
      scf.for %j = %tid to %words step %threads {
        %at = arith.addi %base, %j : index
        %v = memref.load %src[%at] : memref<?xi32>
        memref.store %v, %tile[%j] : memref<16384xi32, #gpu.address_space<workgroup>>
      }
      gpu.barrier
      scf.for %j = %tid to %words step %threads {
        %from = arith.subi %last, %j : index
        %v = memref.load %tile[%from] : memref<16384xi32, #gpu.address_space<workgroup>>
        %at = arith.addi %base, %j : index
        memref.store %v, %dst[%at] : memref<?xi32>
      }
      gpu.return
    }
  }

  func.func @shared_memory(%host_in: memref<?xi32>, %host_out: memref<?xi32>) attributes {llvm.emit_c_interface} {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c1024 = arith.constant 1024 : index
    %words = arith.constant 16384 : index
    %smem = arith.constant 65536 : i32
    %n = memref.dim %host_in, %c0 : memref<?xi32>
    %blocks = arith.divui %n, %words : index
    %t0 = gpu.wait async
    %a, %t1 = gpu.alloc async [%t0] (%n) : memref<?xi32>
    %b, %t2 = gpu.alloc async [%t1] (%n) : memref<?xi32>
    %t3 = gpu.memcpy async [%t2] %a, %host_in : memref<?xi32>, memref<?xi32>
    %t4 = gpu.launch_func async [%t3] @kernels::@reverse_blocks blocks in (%blocks, %c1, %c1) threads in (%c1024, %c1, %c1) dynamic_shared_memory_size %smem args(%a : memref<?xi32>, %b : memref<?xi32>)
    %t5 = gpu.memcpy async [%t4] %host_out, %b : memref<?xi32>, memref<?xi32>
    %t6 = gpu.dealloc async [%t5] %a : memref<?xi32>
    %t7 = gpu.dealloc async [%t6] %b : memref<?xi32>
    gpu.wait [%t7]
    return
  }
}
