/* summary.c: the JSON summary members fsdp-train and fsdp-plan share (see
 * summary.h, [Note: one writer for the shared keys]). */
#include "driver/summary.h"

#include <stdio.h>
#include <string.h>

#include "base/dtype.h"
#include "base/error.h"
#include "kernels/kernels.h"
#include "model/family.h"

void FsdpSummaryRunMembers(FsdpJson j, const FsdpTrainOptions *o, const FsdpSummaryTopology *t)
{
  FsdpJsonInt(j, "world_size", t->world_size);
  FsdpJsonInt(j, "sharding_factor", t->sharding_factor);
  FsdpJsonInt(j, "replica_size", t->replica_size);
  FsdpJsonInt(j, "ranks_per_node", t->ranks_per_node);
  FsdpJsonInt(j, "nodes", t->nodes);
  const FsdpModelDesc *c = &o->model;
  FsdpJsonBeginObject(j, "model");
  FsdpJsonString(j, "name", o->model_name);
  /* the family's attributes in their order (GPT: n_layer n_embd n_head
   * vocab_size seq_len, as before); "family" only for others, so a GPT
   * summary stays as it was */
  if (strcmp(c->family, "gpt2") != 0) FsdpJsonString(j, "family", c->family);
  for (int i = 0; i < c->nattrs; i++) {
    const FsdpModelAttr *a = &c->attr[i];
    if (a->type == FSDP_MODEL_ATTR_INT) FsdpJsonInt(j, a->name, a->i);
    else if (a->type == FSDP_MODEL_ATTR_REAL) FsdpJsonReal(j, a->name, a->r);
    else FsdpJsonString(j, a->name, a->s);
  }
  FsdpJsonInt(j, "param_count", FsdpModelDescParamCount(c));
  FsdpJsonEndObject(j);
  const FsdpRuntimeOptions *f = &o->fsdp;
  FsdpJsonInt(j, "batch_size", o->batch_size);
  FsdpJsonInt(j, "wrap", o->wrap);
  FsdpJsonInt(j, "reshard_after_forward", f->reshard_after_forward);
  FsdpJsonInt(j, "limit_all_gathers", f->limit_all_gathers);
  FsdpJsonInt(j, "grad_accum", f->grad_accum);
  FsdpJsonInt(j, "accum_comm", f->accum_comm);
  FsdpJsonString(j, "prefetch", FsdpPrefetchNames[f->prefetch]);
  FsdpJsonInt(j, "recompute", f->recompute);
  FsdpJsonString(j, "attention", FsdpAttentionNames[f->attention]);
}

void FsdpSummaryUnit(FsdpJson j, const char *name, FlatParam fp)
{
  FsdpJsonBeginObject(j, NULL);
  FsdpJsonString(j, "name", name);
  FsdpJsonInt(j, "numel", FlatParamNumel(fp));
  FsdpJsonInt(j, "padded_numel", FlatParamPaddedNumel(fp));
  FsdpJsonInt(j, "shard_numel", FlatParamShardNumel(fp));
  FsdpJsonEndObject(j);
}

void FsdpSummaryBeginMemory(FsdpJson j, const FsdpSummaryMemory *m)
{
  FsdpJsonBeginObject(j, "memory");
  FsdpJsonUint(j, "param_shard_bytes", m->param_shard);
  FsdpJsonUint(j, "grad_shard_bytes", m->grad_shard);
  FsdpJsonUint(j, "optim_state_bytes", m->optim_state);
  FsdpJsonUint(j, "gather_buffer_bytes", m->gather_buffer);
  FsdpJsonUint(j, "grad_buffer_bytes", m->grad_buffer);
  FsdpJsonUint(j, "compute_buffer_bytes", m->compute_buffer);
  FsdpJsonUint(j, "activation_bytes", m->activations);
}

void FsdpSummaryBeginComm(FsdpJson j, const FsdpCommCounters *c)
{
  static const char *const kKey[FSDP_COLL_NKINDS][2] = {
      {"all_gather_bytes", "all_gather_calls"},
      {"reduce_scatter_bytes", "reduce_scatter_calls"},
      {"all_reduce_bytes", "all_reduce_calls"}};
  FsdpJsonBeginObject(j, "comm_per_step");
  for (int k = 0; k < FSDP_COLL_NKINDS; k++) FsdpJsonUint(j, kKey[k][0], c->bytes[k]);
  for (int k = 0; k < FSDP_COLL_NKINDS; k++) FsdpJsonUint(j, kKey[k][1], c->calls[k]);
  FsdpJsonUint(j, "intra_node_bytes", c->intra_bytes);
  FsdpJsonUint(j, "inter_node_bytes", c->inter_bytes);
}

void FsdpSummaryBeginCommTime(FsdpJson j, int max_gathers_in_flight)
{
  FsdpJsonBeginObject(j, "comm_time_per_step");
  FsdpJsonInt(j, "max_gathers_in_flight", max_gathers_in_flight);
}

void FsdpSummaryBeginPrecision(FsdpJson j, const FsdpRuntimeOptions *o, int device_cuda)
{
  FsdpJsonBeginObject(j, "precision");
  FsdpJsonString(j, "param_dtype", FsdpDtypeNames[o->param_dtype]);
  FsdpJsonString(j, "reduce_dtype", FsdpDtypeNames[o->reduce_dtype]);
  FsdpJsonString(j, "compute_dtype", FsdpDtypeNames[o->compute_dtype]);
  char lib[64], kernel[160];
  /* true only where fp32 matmuls really run on TF32 (FsdpDeviceSetTF32) */
  FsdpJsonBool(j, "tf32", device_cuda && o->tf32);
  if (device_cuda) {
    snprintf(lib, sizeof lib, "cuBLASLt");
    if (o->compute_dtype == FSDP_DTYPE_BF16)
      snprintf(kernel, sizeof kernel,
               "cublasLtMatmul, bf16 operands (rounded from fp32), fp32 accumulation");
    else
      snprintf(kernel, sizeof kernel, "cublasLtMatmul, fp32 operands, %s",
               o->tf32 ? "TF32 tensor cores (CUBLAS_COMPUTE_32F_FAST_TF32)"
                       : "exact fp32 (CUBLAS_COMPUTE_32F)");
  } else {
    FsdpKernelsCpuGemm(o->compute_dtype == FSDP_DTYPE_BF16, lib, sizeof lib, kernel,
                       sizeof kernel);
  }
  FsdpJsonBeginObject(j, "gemm");
  FsdpJsonString(j, "library", lib);
  FsdpJsonString(j, "kernel", kernel);
  FsdpJsonEndObject(j);
}

void FsdpSummaryValLosses(FsdpJson j, const int64_t *steps, const double *losses, int n)
{
  FsdpJsonBeginArray(j, "val_losses");
  for (int i = 0; i < n; i++) {
    FsdpJsonBeginArray(j, NULL);
    FsdpJsonInt(j, NULL, steps[i]);
    FsdpJsonReal(j, NULL, losses[i]);
    FsdpJsonEndArray(j);
  }
  FsdpJsonEndArray(j);
}

int FsdpSummaryPrint(FsdpJson *pj, FILE *out)
{
  int err = FsdpJsonFinish(*pj);
  if (!err) {
    fprintf(out, "%s\n", FsdpJsonText(*pj));
    fflush(out);
  }
  FSDP_CALL(FsdpJsonDestroy(pj));
  FSDP_CALL(err);
  return FSDP_SUCCESS;
}
