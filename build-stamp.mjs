// The build id stamped into every executable build.mjs writes, so a plugin can
// tell that a delegate it found in CNI_PATH is the very same build as itself
// (and run it in its own process) by reading a few bytes of the file: no
// process, whatever the install (hard links, symlinks, copies under any name,
// the Debian package, the scripts). src/cni/build-stamp.ts reads it; the two
// formats below must stay in step (test/unit/cni/build-stamp.test.ts checks).
//
//   script:     line 2 is  `//cni-ts-build:<id>:<bundle>`   (the bundle the script runs)
//   standalone: the file ends with `\ncni-ts-build:<id>\n`  (bytes after the ELF
//               image, which the loader ignores; the bundle is the name it runs as)
import { createHash } from 'node:crypto';
import { appendFileSync } from 'node:fs';

export const STAMP_PREFIX = 'cni-ts-build:';

/** One id for every executable of one build: the hash of all its bundles and the version. */
export function buildId(version, payloads) {
  const h = createHash('sha256').update(version);
  for (const name of Object.keys(payloads).sort()) h.update(`\0${name}\0`).update(payloads[name]);
  return h.digest('hex').slice(0, 32);
}

/** The script's second line, after its `#!` line. */
export const scriptStamp = (id, bundle) => `//${STAMP_PREFIX}${id}:${bundle}\n`;

/** Appends the trailer to a standalone executable (after postject, before it is linked). */
export function stampStandalone(file, id) {
  appendFileSync(file, `\n${STAMP_PREFIX}${id}\n`);
}
