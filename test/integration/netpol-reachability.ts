// Truth tables for the network policy tests, written the way Kubernetes'
// netpol e2e tests write theirs (test/e2e/network/netpol: a Reachability of
// every pod to every pod, set with ExpectPeer/ExpectAllIngress), and compared
// whole with what the probes saw, with a readable difference.
//
// Pods are "namespace/name". A pod always reaches itself (its own address
// never leaves its namespace: the e2e tests' AllowLoopback).

export type Port = 'tcp/80' | 'tcp/81' | 'udp/80' | 'sctp/80';
export const PORTS: readonly Port[] = ['tcp/80', 'tcp/81', 'udp/80'];

/** Which pods: one, several, a predicate, or '*' for all. */
export type Pods = string | readonly string[] | ((pod: string) => boolean);

export const inNs =
  (...namespaces: string[]) =>
  (pod: string) =>
    namespaces.includes(pod.split('/')[0]);
export const named =
  (...names: string[]) =>
  (pod: string) =>
    names.includes(pod.split('/')[1]);
export const not = (p: Pods) => (pod: string) => !matchesPods(p, pod);

function matchesPods(p: Pods, pod: string): boolean {
  if (p === '*') return true;
  if (typeof p === 'string') return p === pod;
  if (typeof p === 'function') return p(pod);
  return p.includes(pod);
}

/** Whether `from` reaches `to` on each port; everything allowed to begin with. */
export class Reach {
  private readonly cells = new Map<string, boolean>();

  constructor(
    readonly pods: readonly string[],
    readonly ports: readonly Port[] = PORTS,
  ) {}

  private key = (from: string, to: string, port: Port) => `${from} ${to} ${port}`;

  set(from: Pods, to: Pods, allowed: boolean, ports: readonly Port[] = this.ports): this {
    for (const f of this.pods)
      for (const t of this.pods)
        if (matchesPods(from, f) && matchesPods(to, t)) for (const p of ports) this.cells.set(this.key(f, t, p), allowed);
    return this;
  }

  allow(from: Pods, to: Pods, ports?: readonly Port[]): this {
    return this.set(from, to, true, ports);
  }

  deny(from: Pods, to: Pods, ports?: readonly Port[]): this {
    return this.set(from, to, false, ports);
  }

  get(from: string, to: string, port: Port): boolean {
    return from === to || (this.cells.get(this.key(from, to, port)) ?? true);
  }
}

/** What the probes saw: per family, from, to and port, reached or not. */
export type Observed = Map<string, boolean>;
export const observedKey = (family: 4 | 6, from: string, to: string, port: Port) => `${family} ${from} ${to} ${port}`;

/** The cells where `observed` differs from `expected`; none when they agree. */
export function differences(expected: Reach, observed: Observed, families: readonly (4 | 6)[]): string[] {
  const out: string[] = [];
  for (const family of families)
    for (const from of expected.pods)
      for (const to of expected.pods)
        for (const port of expected.ports) {
          const want = expected.get(from, to, port);
          const got = observed.get(observedKey(family, from, to, port));
          if (got !== want)
            out.push(
              `IPv${family} ${port} ${from} -> ${to}: expected ${want ? 'reached' : 'blocked'}, ${got === undefined ? 'not probed' : got ? 'reached' : 'blocked'}`,
            );
        }
  return out;
}

/**
 * The tables side by side, one per family and port that has a difference,
 * as cyclonus prints them: rows are sources, columns destinations, "."
 * reached, "X" blocked, a wrong cell in brackets.
 */
export function formatTables(expected: Reach, observed: Observed, families: readonly (4 | 6)[]): string {
  const pods = expected.pods;
  const w = Math.max(...pods.map((p) => p.length));
  const blocks: string[] = [];
  for (const family of families) {
    for (const port of expected.ports) {
      const wrong = pods.some((f) => pods.some((t) => observed.get(observedKey(family, f, t, port)) !== expected.get(f, t, port)));
      if (!wrong) continue;
      const head = `${' '.repeat(w)} ${pods.map((p) => p.padStart(w)).join(' ')}`;
      const rows = pods.map((f) => {
        const cells = pods.map((t) => {
          const want = expected.get(f, t, port);
          const got = observed.get(observedKey(family, f, t, port));
          const mark = got === undefined ? '?' : got ? '.' : 'X';
          return (got === want ? ` ${mark} ` : `[${mark}]`).padStart(w);
        });
        return `${f.padEnd(w)} ${cells.join(' ')}`;
      });
      blocks.push(`IPv${family} ${port} (rows: from, columns: to; . reached, X blocked, [ ] not as expected)\n${head}\n${rows.join('\n')}`);
    }
  }
  return blocks.join('\n\n');
}
