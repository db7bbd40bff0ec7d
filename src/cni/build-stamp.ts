// Which build an executable is, read from the file itself (build-stamp.mjs
// writes the stamp): a script names its build and bundle on its second line,
// a standalone executable its build in a trailer after the ELF image. Reading
// costs an open and one or two small reads, no process. A file without a
// readable stamp is simply not ours.
import { closeSync, fstatSync, openSync, readSync } from 'node:fs';

export interface BuildStamp {
  /** The build's id, the same in every executable of one build. */
  id: string;
  /** The bundle a script runs; a standalone executable runs the one it is named after. */
  bundle?: string;
}

const HEAD = 512; // the `#!` line (up to 256 bytes: build.mjs's unsets the NODE_* variables) and the stamp line
const TAIL = 64;
const SCRIPT_LINE = /^\/\/cni-ts-build:([0-9a-f]{32}):([a-z][a-z-]*)$/;
const TRAILER = /\ncni-ts-build:([0-9a-f]{32})\n$/;

function readAt(fd: number, length: number, position: number): string {
  const buf = Buffer.alloc(length);
  return buf.toString('latin1', 0, readSync(fd, buf, 0, length, position));
}

/** The stamp of `file`, or undefined when it has none (or cannot be read). */
export function readBuildStamp(file: string): BuildStamp | undefined {
  let fd: number;
  try {
    fd = openSync(file, 'r');
  } catch {
    return undefined;
  }
  try {
    const head = readAt(fd, HEAD, 0);
    if (head.startsWith('#!')) {
      const lines = head.split('\n');
      const m = lines.length > 2 ? SCRIPT_LINE.exec(lines[1]) : null;
      return m ? { id: m[1], bundle: m[2] } : undefined;
    }
    if (!head.startsWith('\x7fELF')) return undefined;
    const size = fstatSync(fd).size;
    if (size < TAIL) return undefined;
    const m = TRAILER.exec(readAt(fd, TAIL, size - TAIL));
    return m ? { id: m[1] } : undefined;
  } catch {
    return undefined;
  } finally {
    closeSync(fd);
  }
}

let own: BuildStamp | null | undefined;

/**
 * This process's own stamp: the standalone executable's (process.execPath),
 * or the script's that node runs (process.argv[1]). Undefined when running
 * from sources (tests) or an unstamped file.
 */
export function ownBuildStamp(): BuildStamp | undefined {
  if (own === undefined) {
    let standalone = false;
    try {
      standalone = (require('node:sea') as typeof import('node:sea')).isSea();
    } catch {
      // a Node without SEA support runs only the scripts
    }
    const self = standalone ? process.execPath : process.argv[1];
    own = (self && readBuildStamp(self)) || null;
  }
  return own ?? undefined;
}
