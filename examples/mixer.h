/* mixer.h: a causal MLP-mixer language model as an fsdp model family,
 * written against the installed libfsdp only (<libfsdp.h>, pkg-config fsdp).
 *
 * A program registers the family before it reads its options:
 *
 *   FSDP_CALL(FsdpModelFamilyRegister(&MixerFamily));
 *
 * after which -model mixer-tiny (or mixer-small, or -model custom -family
 * mixer -n_layer 3 ...) selects it in FsdpTrainOptionsFromDb, and the
 * driver shards, trains, checkpoints and records it like the built-in
 * families.  See mixer.c for the model and examples/README.md.
 */
#ifndef MIXER_H
#define MIXER_H

#include <libfsdp.h>

#define MIXER_FAMILY "mixer"

/* The family's operations (model/family.h: FsdpModelFamily). */
extern const FsdpModelFamily MixerFamily;

#endif
