"""A JAX jit training step for the recorder: an MLP, SGD, STEPS steps."""
import sys
import time

import jax
import jax.numpy as jnp

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 20
key = jax.random.PRNGKey(0)
sizes = [512, 1024, 1024, 10]
keys = jax.random.split(key, len(sizes))
params = [
    (jax.random.normal(k, (a, b)) * 0.02, jnp.zeros(b))
    for k, a, b in zip(keys, sizes[:-1], sizes[1:])
]
x = jax.random.normal(keys[-1], (256, sizes[0]))
y = jax.random.randint(keys[-1], (256,), 0, 10)


def loss_fn(params, x, y):
    h = x
    for w, b in params[:-1]:
        h = jax.nn.gelu(h @ w + b)
    w, b = params[-1]
    logits = h @ w + b
    return -jnp.mean(jax.nn.log_softmax(logits)[jnp.arange(y.shape[0]), y])


@jax.jit
def step(params, x, y):
    loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
    return [(w - 0.01 * gw, b - 0.01 * gb) for (w, b), (gw, gb) in zip(params, grads)], loss


params, loss = step(params, x, y)
loss.block_until_ready()
start = time.perf_counter()
for _ in range(steps):
    params, loss = step(params, x, y)
loss.block_until_ready()
elapsed = time.perf_counter() - start
print(f"jax: {steps} steps on {jax.devices()[0]}, {elapsed / steps * 1e3:.3f} ms/step, loss {float(loss):.4f}")
