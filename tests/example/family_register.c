/* family_register.c: FsdpModelFamilyRegister as a program outside the tree
 * sees it (tests/test_example.sh builds it with examples/mixer.c against
 * the installed libfsdp): the registered family is found by name; a
 * second family of the same name, one with a preset another family has
 * (-model would be ambiguous), and one lacking an operation are usage
 * errors that name the problem and register nothing.  Prints one "ok:"
 * line per check, "FAIL:" otherwise; exit 1 on any failure.
 *   usage: mpiexec -n 1 ./family_register
 */
#include <libfsdp.h>
#include <stdio.h>
#include <string.h>

#include "mixer.h"

static int fails = 0;

static void Expect(int cond, const char *what)
{
  printf("%s: %s\n", cond ? "ok" : "FAIL", what);
  if (!cond) fails++;
}

/* A usage error whose message contains `needle`. */
static void ExpectUsage(int err, const char *needle, const char *what)
{
  const char *msg = FsdpErrorLastMessage();
  Expect(err == FSDP_ERR_USAGE && msg && strstr(msg, needle), what);
  if (err != FSDP_ERR_USAGE || !msg || !strstr(msg, needle))
    printf("    got %s, message '%s' (wanted one naming '%s')\n", FsdpErrorName(err),
           msg ? msg : "", needle);
}

int main(int argc, char **argv)
{
  int err = FsdpInitialize(&argc, &argv);
  if (err) return FsdpExitStatus(err);
  Expect(FsdpModelFamilyFind(MIXER_FAMILY) == NULL, "mixer is unknown before it is registered");
  Expect(FsdpModelFamilyFind("gpt2") != NULL && FsdpModelFamilyFind("llama") != NULL,
         "the built-in families are there");
  Expect(FsdpModelFamilyRegister(&MixerFamily) == FSDP_SUCCESS, "mixer registers");
  Expect(FsdpModelFamilyFind(MIXER_FAMILY) == &MixerFamily, "FsdpModelFamilyFind finds it");

  ExpectUsage(FsdpModelFamilyRegister(&MixerFamily), "'mixer' is already registered",
              "a second family named mixer is a usage error");
  FsdpModelFamily gpt_clash = *FsdpModelFamilyFind("gpt2");
  ExpectUsage(FsdpModelFamilyRegister(&gpt_clash), "'gpt2' is already registered",
              "a family named like a built-in one is a usage error");

  static const char *const tiny[] = {"mixer-huge", "tiny", NULL};
  FsdpModelFamily preset_clash = MixerFamily;
  preset_clash.name = "mixer2";
  preset_clash.presets = tiny;
  ExpectUsage(FsdpModelFamilyRegister(&preset_clash), "preset 'tiny'",
              "a preset GPT has (-model tiny) is a usage error");

  FsdpModelFamily no_loss = MixerFamily;
  no_loss.name = "mixer3";
  no_loss.loss = NULL;
  ExpectUsage(FsdpModelFamilyRegister(&no_loss), "lacks a model operation",
              "a family without a loss operation is a usage error");
  Expect(!FsdpModelFamilyFind("mixer2") && !FsdpModelFamilyFind("mixer3"),
         "refused families are not registered");
  FsdpFinalize();
  return fails ? 1 : 0;
}
