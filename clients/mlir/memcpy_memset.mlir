// gpu.memset (32- and 16-bit values) and gpu.memcpy in every direction: host to device,
// device to device, device to host. out32[i] = 0x2a2a0007 for every i, out16[i] = 0x0bad.
module attributes {gpu.container_module} {
  func.func @memcpy_memset(%out32: memref<?xi32>, %out16: memref<?xi16>) attributes {llvm.emit_c_interface} {
    %c0 = arith.constant 0 : index
    %v32 = arith.constant 0x2a2a0007 : i32
    %v16 = arith.constant 0x0bad : i16
    %n = memref.dim %out32, %c0 : memref<?xi32>
    %m = memref.dim %out16, %c0 : memref<?xi16>
    %t0 = gpu.wait async
    %a, %t1 = gpu.alloc async [%t0] (%n) : memref<?xi32>
    %b, %t2 = gpu.alloc async [%t1] (%n) : memref<?xi32>
    %h, %t3 = gpu.alloc async [%t2] (%m) : memref<?xi16>
    %t4 = gpu.memset async [%t3] %a, %v32 : memref<?xi32>, i32
    %t5 = gpu.memcpy async [%t4] %b, %a : memref<?xi32>, memref<?xi32>
    %t6 = gpu.memcpy async [%t5] %out32, %b : memref<?xi32>, memref<?xi32>
    %t7 = gpu.memcpy async [%t6] %h, %out16 : memref<?xi16>, memref<?xi16>
    %t8 = gpu.memset async [%t7] %h, %v16 : memref<?xi16>, i16
    %t9 = gpu.memcpy async [%t8] %out16, %h : memref<?xi16>, memref<?xi16>
    %t10 = gpu.dealloc async [%t9] %a : memref<?xi32>
    %t11 = gpu.dealloc async [%t10] %b : memref<?xi32>
    %t12 = gpu.dealloc async [%t11] %h : memref<?xi16>
    gpu.wait [%t12]
    return
  }
}
