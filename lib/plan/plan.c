/* plan.c: the plan of one fsdp-train run (plan.h). */
#include "plan/plan.h"

#include <string.h>

#include "base/error.h"

int FsdpPlanCompute(const FsdpPlanRun *run, const FsdpPlanPredictOptions *o,
                    const FsdpProfile *cached, FsdpPlanUnitsCache *cache, FsdpPlan *plan)
{
  memset(plan, 0, sizeof *plan);
  plan->run = *run;
  FSDP_CALL(FsdpPlanRunCheck(&plan->run));
  FSDP_CALL(FsdpPlanGroups(&plan->run, &plan->shard, &plan->replica));
  if (cache) {
    FSDP_CALL(FsdpPlanUnitsCached(cache, &plan->run, plan->shard.rank, &plan->units));
  } else {
    FSDP_CALL(FsdpPlanUnitsCreate(&plan->run, plan->shard.rank, &plan->owned_units));
    plan->units = &plan->owned_units;
  }
  FSDP_CALL(FsdpPlanMemoryCompute(&plan->run, plan->units, &plan->mem));
  FsdpPlanTrafficCompute(&plan->run, plan->units, &plan->shard, &plan->replica, &plan->traffic);
  FSDP_CALL(FsdpPlanPredict(&plan->run, plan->units, &plan->mem, &plan->traffic, &plan->shard,
                            &plan->replica, o, cached, &plan->pred));
  return FSDP_SUCCESS;
}

void FsdpPlanFree(FsdpPlan *plan)
{
  FsdpPlanPredictionFree(&plan->pred);
  FsdpPlanUnitsFree(&plan->owned_units);
  plan->units = NULL;
}

double FsdpPlanTokensPerSecond(const FsdpPlan *plan)
{
  double step_s = plan->pred.profile.sim.step_s;
  return step_s > 0 ? plan->pred.tokens_per_step / step_s : 0.0;
}
