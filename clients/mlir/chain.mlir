// A chain of 1,000 dependent asynchronous launches (launch-bound): each adds one to every
// element after the previous one, so data[i] = 1000 after one execution.
//
// MLIR's lowering cannot carry an async token through scf.for's iter_args (nor through a
// block argument: it then takes the stream for an event), so the chain is written out:
// `cargo xtask mlir` writes the line after `@repeat N` N times, with `{i}` counting from 0
// and `{i+1}` the next number.
module attributes {gpu.container_module} {
  gpu.module @kernels {
    gpu.func @add_one(%data: memref<?xi32>, %n: index) kernel {
      %i = gpu.global_id x
      %in = arith.cmpi ult, %i, %n : index
      scf.if %in {
        %one = arith.constant 1 : i32
        %v = memref.load %data[%i] : memref<?xi32>
        %r = arith.addi %v, %one : i32
        memref.store %r, %data[%i] : memref<?xi32>
      }
      gpu.return
    }
  }

  func.func @chain(%host_out: memref<?xi32>) attributes {llvm.emit_c_interface} {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c256 = arith.constant 256 : index
    %c255 = arith.constant 255 : index
    %zero = arith.constant 0 : i32
    %n = memref.dim %host_out, %c0 : memref<?xi32>
    %n255 = arith.addi %n, %c255 : index
    %blocks = arith.divui %n255, %c256 : index
    %t0 = gpu.wait async
    %data, %t1 = gpu.alloc async [%t0] (%n) : memref<?xi32>
    %l0 = gpu.memset async [%t1] %data, %zero : memref<?xi32>, i32
    // @repeat 1000
    %l{i+1} = gpu.launch_func async [%l{i}] @kernels::@add_one blocks in (%blocks, %c1, %c1) threads in (%c256, %c1, %c1) args(%data : memref<?xi32>, %n : index)
    %t2 = gpu.memcpy async [%l1000] %host_out, %data : memref<?xi32>, memref<?xi32>
    %t3 = gpu.dealloc async [%t2] %data : memref<?xi32>
    gpu.wait [%t3]
    return
  }
}
