/* describe.c: the profile of a cluster on paper (describe.h). */
#include "plan/describe.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

#include "comm/coll.h"

/* A curve of two points on t = latency + v / bandwidth (the fit gives
 * them back exactly). */
static void DescribedCurve(FsdpProfileCurve *c, double latency, double bandwidth)
{
  c->n = 2;
  c->bytes[0] = 1 << 20;
  c->bytes[1] = 1 << 30;
  for (int i = 0; i < 2; i++) c->seconds[i] = latency + c->bytes[i] / bandwidth;
  FsdpProfileFit(c);
}

void FsdpProfileDescribe(const FsdpProfileDescription *d, const char *model_name,
                         double peak_flops, FsdpProfile *p)
{
  memset(p, 0, sizeof *p);
  snprintf(p->host, sizeof p->host, "%s", d->host);
  snprintf(p->cpu, sizeof p->cpu, "%s", d->device);
  time_t now = time(NULL);
  strftime(p->date, sizeof p->date, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
  snprintf(p->backend, sizeof p->backend, "%s", d->backend);
  snprintf(p->blas_core, sizeof p->blas_core, "n/a");
  snprintf(p->model, sizeof p->model, "%s", model_name);
  snprintf(p->source, sizeof p->source, "described");
  p->nodes = (int)d->nodes;
  p->ranks_per_node = (int)d->ranks_per_node;
  p->world_size = p->nodes * p->ranks_per_node;
  p->threads = 1;
  p->mem_available = (int64_t)d->mem;
  p->gemm_flops_per_s = d->gemm_flops;
  p->peak_flops_per_s = peak_flops;
  p->attention_flops_per_s = d->attention_flops > 0 ? d->attention_flops : d->gemm_flops;
  p->stream_bytes_per_s = d->stream_bw;
  p->adamw_bytes_per_s = d->adamw_bw > 0 ? d->adamw_bw : d->stream_bw;
  p->contended_factor = d->contended;
  p->cores_per_node = (int)d->cores;
  p->join_fraction = d->join;
  p->sustained_factor = d->sustained;
  p->concurrent_factor = d->concurrent;
  int G = p->ranks_per_node, N = p->nodes;
  double net = d->net_bw_per_node / G;
  const struct {
    int size, intra, inter;
    double latency, bw;
  } lv[FSDP_PROFILE_NLEVELS] = {
      {G > 1 ? G : 0, G - 1, 0, d->node_latency, d->node_bw},
      {N > 1 ? N : 0, 0, N - 1, d->net_latency, net},
      {p->world_size > 1 ? p->world_size : 0, G - 1, p->world_size - G,
       N > 1 ? d->net_latency : d->node_latency, N > 1 && net < d->node_bw ? net : d->node_bw}};
  for (int l = 0; l < FSDP_PROFILE_NLEVELS; l++) {
    p->level_size[l] = lv[l].size;
    p->level_peers_intra[l] = lv[l].intra;
    p->level_peers_inter[l] = lv[l].inter;
    for (int k = 0; lv[l].size && k < FSDP_COLL_NKINDS; k++)
      DescribedCurve(&p->coll[l][k], lv[l].latency, lv[l].bw);
  }
}

