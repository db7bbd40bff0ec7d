// What the build made, read as a node would receive it: the ELF machine of
// every executable and library in a tree (a package or an image, unpacked),
// and an image archive (make image) unpacked into its config and root
// filesystem. readelf reads any architecture's files (ldd cannot).
import { closeSync, mkdirSync, openSync, readdirSync, readFileSync, readSync } from 'node:fs';
import { join, relative } from 'node:path';
import { sh } from './helpers';

/** readelf -h's name for each architecture's machine. */
export const ELF_MACHINE = { amd64: 'Advanced Micro Devices X86-64', arm64: 'AArch64' } as const;

function isElf(file: string): boolean {
  const fd = openSync(file, 'r');
  try {
    const magic = Buffer.alloc(4);
    return readSync(fd, magic, 0, 4, 0) === 4 && magic.toString('latin1') === '\x7fELF';
  } finally {
    closeSync(fd);
  }
}

/** Every regular file under `dir` (links are not followed). */
function regularFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const path = join(dir, e.name);
    if (e.isDirectory()) return regularFiles(path);
    return e.isFile() ? [path] : [];
  });
}

/** The ELF files under `dir` (paths relative to it) -> readelf's Machine, with one readelf for all of them. */
export function elfMachines(dir: string): Map<string, string> {
  const files = regularFiles(dir).filter(isElf);
  const machines = new Map<string, string>();
  if (files.length === 0) return machines;
  // With several files readelf heads each one's header with "File: <path>".
  let current: string | undefined;
  for (const line of sh(['readelf', '-h', ...files]).split('\n')) {
    const file = /^File: (.+)$/.exec(line)?.[1];
    if (file !== undefined) current = relative(dir, file);
    const machine = /^\s*Machine:\s*(.+)$/.exec(line)?.[1];
    if (machine !== undefined && current !== undefined) machines.set(current, machine.trim());
  }
  if (machines.size !== files.length) throw new Error(`readelf named ${machines.size} of ${files.length} ELF files under ${dir}`);
  return machines;
}

/** Those of `machines` that are not `want`, as "path: machine" lines (none when all are). */
export function foreignElf(machines: Map<string, string>, want: string): string[] {
  return [...machines].filter(([, m]) => m !== want).map(([f, m]) => `${f}: ${m}`);
}

export interface UnpackedImage {
  /** The image config (architecture, os, entrypoint ...). */
  config: Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any
  /** Its layers, extracted in order into one directory. */
  root: string;
}

/** Unpacks an image archive (docker-archive layout: manifest.json, config, layer tarballs) into `dir`. */
export function unpackImage(tar: string, dir: string): UnpackedImage {
  const archive = join(dir, 'archive');
  const root = join(dir, 'rootfs');
  mkdirSync(archive, { recursive: true });
  mkdirSync(root);
  sh(['tar', '-xf', tar, '-C', archive]);
  const [manifest] = JSON.parse(readFileSync(join(archive, 'manifest.json'), 'utf8')) as { Config: string; Layers: string[] }[];
  for (const layer of manifest.Layers) sh(['tar', '-xf', join(archive, layer), '-C', root]);
  return { config: JSON.parse(readFileSync(join(archive, manifest.Config), 'utf8')), root };
}
