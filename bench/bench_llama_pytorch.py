#!/usr/bin/env python3
"""PyTorch CPU comparator for a Llama in fsdp-train (bench/llama_vs_pytorch.sh).

Trains transformers' LlamaForCausalLM (eager attention, fp32, untied head,
no biases) with torch.optim.AdamW and gradient-norm clipping on random
tokens, one optimizer step per iteration, timed as fsdp-train times a step
(batch, zero grads, forward, backward, clip, AdamW step, loss to a float);
prints one JSON object with the median step time after the warm-up steps.
Needs torch and transformers (PyPI): a benchmark comparator, never a
runtime need of fsdp.
"""
import argparse, json, statistics, time

import torch
import transformers

p = argparse.ArgumentParser()
for k, v in (("n_layer", 12), ("n_embd", 768), ("n_head", 12), ("n_kv_head", 4), ("ffn_hidden", 2048),
             ("vocab_size", 50257), ("seq_len", 64), ("batch_size", 4), ("steps", 10), ("warmup", 2),
             ("threads", 2)):
    p.add_argument("--" + k, type=int, default=v)
a = p.parse_args()
torch.set_num_threads(a.threads)
torch.manual_seed(0)
cfg = transformers.LlamaConfig(hidden_size=a.n_embd, intermediate_size=a.ffn_hidden,
                               num_hidden_layers=a.n_layer, num_attention_heads=a.n_head,
                               num_key_value_heads=a.n_kv_head, vocab_size=a.vocab_size,
                               max_position_embeddings=a.seq_len, rope_theta=500000.0,
                               rms_norm_eps=1e-5, tie_word_embeddings=False,
                               attn_implementation="eager")
model = transformers.LlamaForCausalLM(cfg).float()
opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1, betas=(0.9, 0.95))
times = []
for step in range(a.steps):
    x = torch.randint(0, a.vocab_size, (a.batch_size, a.seq_len))
    t0 = time.perf_counter()
    opt.zero_grad(set_to_none=True)
    loss = model(input_ids=x, labels=x).loss
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    float(loss)
    times.append((time.perf_counter() - t0) * 1e3)
print(json.dumps({"step_time_ms_median": statistics.median(times[a.warmup:]),
                  "params": sum(q.numel() for q in model.parameters()),
                  "torch": torch.__version__, "transformers": transformers.__version__}))
