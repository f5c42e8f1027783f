/* test_json: the JSON writer of the summaries (base/json.h).
 *
 * Each case writes a document and compares the whole text with the one a
 * correct writer produces: escapes (quote, backslash, every control
 * character, UTF-8 passed through), nesting with commas only between
 * members, integers at their limits, reals that read back to the same
 * double in the fewest digits, NaN and infinities as null, and every misuse
 * reported by FsdpJsonFinish with the key it concerns.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "base/json.h"
#include "libfsdp.h"
#include "testutil.h"

/* The document j holds, finished without error. */
static const char *Finished(FsdpJson j)
{
  int err = FsdpJsonFinish(j);
  CHECK(err == FSDP_SUCCESS, "FsdpJsonFinish: %d (%s)", err, FsdpErrorLastMessage());
  return FsdpJsonText(j);
}

static void TestNestingAndEscapes(void)
{
  FsdpJson j = NULL;
  TCALL(FsdpJsonCreate(&j));
  FsdpJsonBeginObject(j, NULL);
  FsdpJsonString(j, "plain", "gpt2");
  FsdpJsonString(j, "quote\"key", "say \"hi\" \\ back\\slash");
  FsdpJsonString(j, "controls", "a\nb\tc\rd\be\ff\x01g\x1fh\x7f");
  FsdpJsonString(j, "utf8", "caf\xc3\xa9 \xe2\x86\x92");
  FsdpJsonString(j, "none", NULL);
  FsdpJsonBeginArray(j, "units");
  FsdpJsonBeginObject(j, NULL);
  FsdpJsonString(j, "name", "root");
  FsdpJsonInt(j, "numel", 2);
  FsdpJsonEndObject(j);
  FsdpJsonBeginObject(j, NULL);
  FsdpJsonEndObject(j);
  FsdpJsonBeginArray(j, NULL);
  FsdpJsonEndArray(j);
  FsdpJsonInt(j, NULL, -3);
  FsdpJsonEndArray(j);
  FsdpJsonBeginObject(j, "empty");
  FsdpJsonEndObject(j);
  FsdpJsonBeginObject(j, "memory");
  FsdpJsonBeginObject(j, "inner");
  FsdpJsonUint(j, "bytes", 7);
  FsdpJsonEndObject(j);
  FsdpJsonEndObject(j);
  FsdpJsonEndObject(j);
  const char *want =
      "{\"plain\": \"gpt2\", \"quote\\\"key\": \"say \\\"hi\\\" \\\\ back\\\\slash\", "
      "\"controls\": \"a\\nb\\tc\\rd\\be\\ff\\u0001g\\u001fh\x7f\", "
      "\"utf8\": \"caf\xc3\xa9 \xe2\x86\x92\", \"none\": null, "
      "\"units\": [{\"name\": \"root\", \"numel\": 2}, {}, [], -3], \"empty\": {}, "
      "\"memory\": {\"inner\": {\"bytes\": 7}}}";
  const char *got = Finished(j);
  CHECK(strcmp(got, want) == 0, "nesting/escapes:\n  got  %s\n  want %s", got, want);
  TCALL(FsdpJsonDestroy(&j));
  CHECK(j == NULL, "FsdpJsonDestroy leaves the handle set");
  TCALL(FsdpJsonDestroy(&j)); /* NULL is fine */
}

static void TestIntegers(void)
{
  FsdpJson j = NULL;
  TCALL(FsdpJsonCreate(&j));
  FsdpJsonBeginArray(j, NULL);
  FsdpJsonInt(j, NULL, INT64_MIN);
  FsdpJsonInt(j, NULL, INT64_MAX);
  FsdpJsonUint(j, NULL, UINT64_MAX);
  FsdpJsonInt(j, NULL, 0);
  FsdpJsonEndArray(j);
  const char *want = "[-9223372036854775808, 9223372036854775807, 18446744073709551615, 0]";
  const char *got = Finished(j);
  CHECK(strcmp(got, want) == 0, "integers:\n  got  %s\n  want %s", got, want);
  TCALL(FsdpJsonDestroy(&j));
}

/* One real written alone (an array of one), without the brackets. */
static void RealText(double v, char *buf, size_t size)
{
  FsdpJson j = NULL;
  TCALL(FsdpJsonCreate(&j));
  FsdpJsonBeginArray(j, NULL);
  FsdpJsonReal(j, NULL, v);
  FsdpJsonEndArray(j);
  const char *t = Finished(j);
  size_t n = strlen(t);
  snprintf(buf, size, "%.*s", n >= 2 ? (int)(n - 2) : 0, t + 1);
  TCALL(FsdpJsonDestroy(&j));
}

static void TestReals(void)
{
  /* exact texts: the shortest digits that read back */
  struct { double v; const char *want; } cases[] = {
      {0.1, "0.1"}, {3.0, "3"}, {-2.5, "-2.5"}, {1.0 / 3.0, "0.3333333333333333"},
      {2.0 / 3.0, "0.6666666666666666"}, {1e300, "1e+300"}, {-0.0, "-0"},
      {4.9406564584124654e-324, "5e-324"}, {65536.0, "65536"},
      {0.30000000000000004, "0.30000000000000004"}, {NAN, "null"}, {INFINITY, "null"},
      {-INFINITY, "null"}};
  char got[64];
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    RealText(cases[i].v, got, sizeof got);
    CHECK(strcmp(got, cases[i].want) == 0, "real %.17g: got %s, want %s", cases[i].v, got,
          cases[i].want);
  }
  /* round trip over many bit patterns (finite ones), each in no more
   * digits than needed: one fewer does not read back */
  uint64_t x = 0x9e3779b97f4a7c15ull;
  int bad = 0, longer = 0;
  for (int i = 0; i < 20000; i++) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    double v;
    memcpy(&v, &x, sizeof v);
    if (!isfinite(v)) continue;
    RealText(v, got, sizeof got);
    if (strtod(got, NULL) != v) bad++;
    /* significant digits: from the first non-zero one to the exponent */
    const char *p = got + strspn(got, "-0."), *e = strpbrk(got, "eE");
    int digits = 0;
    for (; *p && p != e; p++) digits += *p >= '0' && *p <= '9';
    char fewer[512];
    snprintf(fewer, sizeof fewer, "%.*g", digits - 1, v);
    if (digits > 1 && strtod(fewer, NULL) == v) longer++;
  }
  CHECK(bad == 0, "%d of 20000 reals did not read back to the same double", bad);
  CHECK(longer == 0, "%d of 20000 reals were written in more digits than needed", longer);
}

typedef void (*Misuse)(FsdpJson j);
static void KeyAtTop(FsdpJson j) { FsdpJsonInt(j, "stray", 1); }
static void NoKeyInObject(FsdpJson j)
{
  FsdpJsonBeginObject(j, NULL);
  FsdpJsonInt(j, NULL, 1);
  FsdpJsonEndObject(j);
}
static void KeyInArray(FsdpJson j)
{
  FsdpJsonBeginArray(j, NULL);
  FsdpJsonReal(j, "losses", 1.0);
  FsdpJsonEndArray(j);
}
static void EndMismatch(FsdpJson j)
{
  FsdpJsonBeginObject(j, NULL);
  FsdpJsonEndArray(j);
}
static void LeftOpen(FsdpJson j)
{
  FsdpJsonBeginObject(j, NULL);
  FsdpJsonBeginArray(j, "units");
}
static void TwoValues(FsdpJson j)
{
  FsdpJsonBeginObject(j, NULL);
  FsdpJsonEndObject(j);
  FsdpJsonBeginObject(j, NULL);
  FsdpJsonEndObject(j);
}
static void TooDeep(FsdpJson j)
{
  FsdpJsonBeginArray(j, NULL);
  for (int d = 1; d <= FSDP_JSON_MAX_DEPTH; d++) FsdpJsonBeginArray(j, NULL);
}
static void Nothing(FsdpJson j) { (void)j; }

static void TestMisuse(void)
{
  struct { const char *name; Misuse write; const char *says; } cases[] = {
      {"key at the top level", KeyAtTop, "\"stray\" at the top level"},
      {"value without a key in an object", NoKeyInObject, "without a key"},
      {"key in an array", KeyInArray, "\"losses\" inside an array"},
      {"EndArray closing an object", EndMismatch, "EndArray without its BeginArray"},
      {"containers left open", LeftOpen, "2 containers left open"},
      {"two top-level values", TwoValues, "second top-level value"},
      {"nesting too deep", TooDeep, "nests deeper than"},
      {"nothing written", Nothing, "nothing was written"}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    FsdpJson j = NULL;
    TCALL(FsdpJsonCreate(&j));
    cases[i].write(j);
    if (cases[i].write != Nothing) FsdpJsonString(j, NULL, "later calls do nothing");
    int err = FsdpJsonFinish(j);
    const char *msg = FsdpErrorLastMessage();
    CHECK(err == FSDP_ERR_INTERNAL, "%s: FsdpJsonFinish returned %d", cases[i].name, err);
    CHECK(strstr(msg, cases[i].says) != NULL, "%s: message '%s' lacks '%s'", cases[i].name, msg,
          cases[i].says);
    TCALL(FsdpJsonDestroy(&j));
  }
}

int main(int argc, char **argv)
{
  TCALL(FsdpInitialize(&argc, &argv));
  TestNestingAndEscapes();
  TestIntegers();
  TestReals();
  TestMisuse();
  int status = test_finish("test_json");
  FsdpFinalize();
  return status;
}
