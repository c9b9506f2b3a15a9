"""Workload 3: greedy generation with a key/value cache grown step by step (one concatenation
per layer and token), over requests of varied batch sizes and prompt lengths. Records every
generated token (the outputs that must be identical), the time per request and the
allocator's figures."""

import hashlib
import random
import time

import common
import model as gpt
import torch


def main():
    p = common.parser(__doc__)
    gpt.add_model_options(p)
    p.add_argument("--requests", type=int, default=24)
    p.add_argument("--new-tokens", type=int, default=64)
    args = p.parse_args()
    allocator = common.Allocator(args)
    common.deterministic(args.seed)
    device = torch.device("cuda", 0)
    net = gpt.build(args, device).eval()
    schedule = random.Random(args.seed)
    data = torch.Generator().manual_seed(args.seed)
    digest, outputs, times, shapes = hashlib.sha256(), [], [], []
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
        for _ in range(args.requests):
            batch = schedule.choice((1, 2, 4, 8, 16, 32))
            prompt = schedule.randint(16, args.max_length - args.new_tokens)
            shapes.append((batch, prompt))
            ids = torch.randint(args.vocab, (batch, prompt), generator=data).to(device)
            started = time.perf_counter()
            caches = [{} for _ in range(args.layers)]
            logits = net(ids, caches)
            generated = []
            for position in range(prompt, prompt + args.new_tokens):
                token = logits[:, -1].argmax(dim=-1, keepdim=True)
                generated.append(token)
                logits = net(token, caches, start=position)
            tokens = torch.cat(generated, dim=1).cpu()  # waits for the request's work
            times.append(time.perf_counter() - started)
            allocator.sample_device(device.index)
            digest.update(tokens.numpy().tobytes())
            outputs.append(tokens[0].tolist())
    common.write_record(
        args,
        allocator,
        {
            "workload": "infer",
            "shapes": shapes,
            "outputs": outputs,
            "digest": digest.hexdigest(),
            "request_seconds": times,
        },
    )


if __name__ == "__main__":
    main()
