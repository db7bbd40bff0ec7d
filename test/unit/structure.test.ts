// The shape of src/: no import cycles between files, and imports only run
// down the layers (a plugin never imports the CLI, the kernel layer never
// imports a plugin). Read from the sources as text, static and dynamic
// imports alike (type-only imports count too: they tie the files together).
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';

const SRC = resolve(__dirname, '../../src');

/** Lower layers first; a file may import its own directory or a lower layer. */
const LAYERS: Record<string, number> = {
  net: 0,
  cni: 1,
  util: 2,
  iproute: 3,
  ipam: 3,
  runtime: 3,
  libcni: 3,
  bridge: 4,
  flannel: 4,
  repair: 5,
  cli: 6,
  boot: 7,
  cmd: 7,
};

function sourceFiles(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) return sourceFiles(path);
    return path.endsWith('.ts') && !path.endsWith('.d.ts') ? [path] : [];
  });
}

/** Project files a source file imports (relative specifiers only). */
export function importsOf(file: string, text: string): string[] {
  const specs = [...text.matchAll(/(?:\bfrom\s+|\bimport\s*\(\s*|^\s*import\s+)['"](\.[^'"]+)['"]/gm)].map((m) => m[1]);
  return specs.map((s) => {
    const base = resolve(dirname(file), s);
    for (const candidate of [`${base}.ts`, join(base, 'index.ts'), base]) {
      try {
        if (statSync(candidate).isFile()) return candidate;
      } catch {
        // try the next form
      }
    }
    throw new Error(`${relative(SRC, file)}: cannot resolve import ${s}`);
  });
}

/** Strongly connected components with more than one file (or a file importing itself): the cycles. */
export function cycles(graph: Map<string, string[]>): string[][] {
  let counter = 0;
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const found: string[][] = [];
  const visit = (v: string) => {
    index.set(v, counter);
    low.set(v, counter++);
    stack.push(v);
    onStack.add(v);
    for (const w of graph.get(v) ?? []) {
      if (!index.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v)!, low.get(w)!));
      } else if (onStack.has(w)) low.set(v, Math.min(low.get(v)!, index.get(w)!));
    }
    if (low.get(v) === index.get(v)) {
      const scc: string[] = [];
      let w: string;
      do {
        w = stack.pop()!;
        onStack.delete(w);
        scc.push(w);
      } while (w !== v);
      if (scc.length > 1 || (graph.get(v) ?? []).includes(v)) found.push(scc.sort());
    }
  };
  for (const v of graph.keys()) if (!index.has(v)) visit(v);
  return found;
}

const layerOf = (file: string) => relative(SRC, file).split('/')[0];

/**
 * Inside flannel/, the same rule one level down: the model at the top
 * (netconfig, lease, subnet-env, manager, log) < where leases come from and
 * what is programmed (store, kube, traffic, backend) < network policy (read
 * from the API through kube's informers) < the daemon and the CNI plugin <
 * the operator commands.
 */
const FLANNEL_LAYERS: Record<string, number> = {
  '.': 0,
  store: 1,
  kube: 1,
  traffic: 1,
  backend: 1,
  policy: 2,
  daemon: 3,
  plugin: 3,
  commands: 4,
};
const FLANNEL = join(SRC, 'flannel');
const flannelLayerOf = (file: string) => {
  const parts = relative(FLANNEL, file).split('/');
  return parts.length === 1 ? '.' : parts[0];
};

/** Folders and how many source files each holds directly. */
function folderSizes(dir: string): Map<string, number> {
  const sizes = new Map<string, number>();
  const entries = readdirSync(dir);
  sizes.set(dir, entries.filter((n) => n.endsWith('.ts') && statSync(join(dir, n)).isFile()).length);
  for (const n of entries) if (statSync(join(dir, n)).isDirectory()) for (const [d, k] of folderSizes(join(dir, n))) sizes.set(d, k);
  return sizes;
}

describe('source structure', () => {
  const files = sourceFiles(SRC);
  const graph = new Map(files.map((f) => [f, importsOf(f, readFileSync(f, 'utf8'))]));

  it('the cycle finder finds a cycle (so an empty answer below means something)', () => {
    const g = new Map([['a', ['b']], ['b', ['c']], ['c', ['a']], ['d', ['a']]]);
    expect(cycles(g)).toEqual([['a', 'b', 'c']]);
    expect(cycles(new Map([['a', ['b']], ['b', []]]))).toEqual([]);
  });

  it('has no import cycle', () => {
    const named = cycles(graph).map((c) => c.map((f) => relative(SRC, f)).join(' <-> '));
    expect(named).toEqual([]);
  });

  it('imports only from its own directory or a lower layer', () => {
    const wrong: string[] = [];
    for (const [file, deps] of graph) {
      const from = layerOf(file);
      expect(LAYERS[from], `${from}/ is not in LAYERS`).toBeDefined();
      for (const dep of deps) {
        const to = layerOf(dep);
        if (to !== from && !(LAYERS[to] < LAYERS[from])) wrong.push(`${relative(SRC, file)} -> ${relative(SRC, dep)}`);
      }
    }
    expect(wrong).toEqual([]);
  });

  it('inside flannel/, imports only from its own folder or a lower one', () => {
    const wrong: string[] = [];
    for (const [file, deps] of graph) {
      if (layerOf(file) !== 'flannel') continue;
      const from = flannelLayerOf(file);
      expect(FLANNEL_LAYERS[from], `flannel/${from}/ is not in FLANNEL_LAYERS`).toBeDefined();
      for (const dep of deps) {
        if (layerOf(dep) !== 'flannel') continue;
        const to = flannelLayerOf(dep);
        if (to !== from && !(FLANNEL_LAYERS[to] < FLANNEL_LAYERS[from])) wrong.push(`${relative(SRC, file)} -> ${relative(SRC, dep)}`);
      }
    }
    expect(wrong).toEqual([]);
  });

  it('no folder holds more than 20 source files directly', () => {
    const crowded = [...folderSizes(SRC)].filter(([, n]) => n > 20).map(([d, n]) => `${relative(SRC, d)}: ${n}`);
    expect(crowded).toEqual([]);
  });
});
