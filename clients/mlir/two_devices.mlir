// Two devices through mgpuSetDefaultDevice: the caller picks the device, the program fills a
// buffer there and copies it out. The C main checks, through the driver, which device the
// allocation landed on (upstream keeps the first device's context: the switch has no effect).
// out[i] = 7 + device.
module attributes {gpu.container_module} {
  gpu.module @kernels {
    gpu.func @fill(%dst: memref<?xi32>, %value: i32, %n: index) kernel {
      %i = gpu.global_id x
      %in = arith.cmpi ult, %i, %n : index
      scf.if %in {
        memref.store %value, %dst[%i] : memref<?xi32>
      }
      gpu.return
    }
  }

  // Allocates on `device` and returns the buffer (for the caller to check where it lives).
  func.func @fill_on(%device: i32, %host_out: memref<?xi32>) -> memref<?xi32> attributes {llvm.emit_c_interface} {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c256 = arith.constant 256 : index
    %c255 = arith.constant 255 : index
    %seven = arith.constant 7 : i32
    gpu.set_default_device %device
    %value = arith.addi %seven, %device : i32
    %n = memref.dim %host_out, %c0 : memref<?xi32>
    %n255 = arith.addi %n, %c255 : index
    %blocks = arith.divui %n255, %c256 : index
    %t0 = gpu.wait async
    %buf, %t1 = gpu.alloc async [%t0] (%n) : memref<?xi32>
    %t2 = gpu.launch_func async [%t1] @kernels::@fill blocks in (%blocks, %c1, %c1) threads in (%c256, %c1, %c1) args(%buf : memref<?xi32>, %value : i32, %n : index)
    %t3 = gpu.memcpy async [%t2] %host_out, %buf : memref<?xi32>, memref<?xi32>
    gpu.wait [%t3]
    return %buf : memref<?xi32>
  }

  // Frees a buffer from @fill_on (on the current default device).
  func.func @release(%buf: memref<?xi32>) attributes {llvm.emit_c_interface} {
    %t0 = gpu.wait async
    %t1 = gpu.dealloc async [%t0] %buf : memref<?xi32>
    gpu.wait [%t1]
    return
  }
}
