// A model of the kernel's side of `inet flannel-netpol` for unit tests: it
// applies the scripts src/flannel/policy/nft.ts writes, line by line, as one
// transaction (all or nothing), refusing what the kernel refuses (checked by
// hand against nft 1.0.6 on Linux 6.x: deleting a missing element, a set or
// chain still referred to, a non-empty chain; a map key added again with
// another verdict; overlapping elements in a concatenated anonymous interval
// set; a reference to a missing set, map or chain), and evaluates a packet
// through the forward chain as the kernel would. Only the statements the
// renderer writes are understood: anything else fails the apply, so a
// renderer change the model does not know fails the tests rather than
// passing them.
import { IP, type Family } from '../../src/net/ip';

export interface Packet {
  family: Family;
  saddr: string;
  daddr: string;
  protocol: 'tcp' | 'udp' | 'sctp' | 'icmp';
  dport: number;
  /** A reply of a tracked connection. */
  reply?: boolean;
}

type Verdict = 'accept' | 'drop' | 'return' | { jump: string } | undefined;
type Pred = (p: Packet, t: Table) => boolean;
interface Rule {
  text: string;
  pred: Pred;
  verdict: 'accept' | 'drop' | 'return' | 'vmap';
  vmap?: { addr: 'saddr' | 'daddr'; map: string };
  counter?: string;
  refs: { sets: string[]; maps: string[] };
}

interface NSet {
  type: string;
  ports: boolean;
  elements: Set<string>;
}
interface NMap {
  type: string;
  elements: Map<string, string>;
}
interface NChain {
  base: boolean;
  rules: Rule[];
}

export interface Table {
  counters: Map<string, number>;
  sets: Map<string, NSet>;
  maps: Map<string, NMap>;
  chains: Map<string, NChain>;
}

const T = 'inet flannel-netpol';

const num = (ip: string) => IP.parse(ip)!.value;

/** An address, prefix or lo-hi range as [lo, hi] of its family. */
function addrRange(text: string): { family: Family; lo: bigint; hi: bigint } {
  if (text.includes('/')) {
    const [a, len] = text.split('/');
    const ip = IP.parse(a)!;
    const bits = BigInt(ip.bits - Number(len));
    const lo = (ip.value >> bits) << bits;
    return { family: ip.family, lo, hi: lo + (1n << bits) - 1n };
  }
  const dash = text.indexOf('-');
  if (dash > 0) {
    const lo = IP.parse(text.slice(0, dash))!;
    const hi = IP.parse(text.slice(dash + 1))!;
    if (!lo || !hi || lo.family !== hi.family || lo.value > hi.value) throw new Error(`bad range ${text}`);
    return { family: lo.family, lo: lo.value, hi: hi.value };
  }
  const ip = IP.parse(text);
  if (!ip) throw new Error(`bad address ${text}`);
  return { family: ip.family, lo: ip.value, hi: ip.value };
}

function portRange(text: string): [number, number] {
  const [a, b] = text.split('-').map(Number);
  const r: [number, number] = [a, b ?? a];
  if (!(r[0] >= 0 && r[1] <= 65535 && r[0] <= r[1])) throw new Error(`bad port ${text}`);
  return r;
}

const PROTOS = new Set(['tcp', 'udp', 'sctp']);
const protoIndex = (p: string) => BigInt(['tcp', 'udp', 'sctp'].indexOf(p));

function braces(text: string): string[] {
  const m = /^\{ (.*) \}$/.exec(text.trim());
  if (!m) throw new Error(`not a set: ${text}`);
  return m[1].split(', ').map((s) => s.trim());
}

/** Elements of a concatenated anonymous set must not overlap (the kernel says "File exists"). */
function noOverlap(boxes: [bigint, bigint][][]): void {
  for (let i = 0; i < boxes.length; i++)
    for (let j = i + 1; j < boxes.length; j++)
      if (boxes[i].every(([lo, hi], k) => lo <= boxes[j][k][1] && boxes[j][k][0] <= hi))
        throw new Error('File exists: overlapping elements');
}

const IPF: Record<string, Family> = { ip: 4, ip6: 6 };

function parseRule(text: string): Rule {
  let m: RegExpExecArray | null;
  const R = (pred: Pred, verdict: Rule['verdict'], refs: Rule['refs'] = { sets: [], maps: [] }, extra: Partial<Rule> = {}): Rule => ({
    text,
    pred,
    verdict,
    refs,
    ...extra,
  });
  if (text === 'ct direction reply accept') return R((p) => !!p.reply, 'accept');
  if (text === 'ct state related accept') return R(() => false, 'accept');
  if (text === 'icmpv6 type { nd-neighbor-solicit, nd-neighbor-advert } accept') return R(() => false, 'accept');
  if ((m = /^(ip6?) (saddr|daddr) vmap @(\S+)$/.exec(text))) {
    const [, f, addr, map] = m;
    return R((p) => p.family === IPF[f], 'vmap', { sets: [], maps: [map] }, { vmap: { addr: addr as 'saddr' | 'daddr', map } });
  }
  if ((m = /^counter name "(\S+)" drop$/.exec(text))) return R(() => true, 'drop', undefined, { counter: m[1] });
  if ((m = /^meta nfproto (ipv4|ipv6) return$/.exec(text))) {
    const f = m[1] === 'ipv4' ? 4 : 6;
    return R((p) => p.family === f, 'return');
  }
  if ((m = /^meta nfproto (ipv4|ipv6) meta l4proto \. th dport (\{.*\}) return$/.exec(text))) {
    const f = m[1] === 'ipv4' ? 4 : 6;
    const ports = portSet(m[2]);
    return R((p) => p.family === f && ports(p), 'return');
  }
  if ((m = /^(ip6?) (saddr|daddr) @(\S+)(?: meta l4proto \. th dport (\{.*\}))? return$/.exec(text))) {
    const [, f, addr, set, portsText] = m;
    const ports = portsText ? portSet(portsText) : () => true;
    return R(
      (p, t) =>
        p.family === IPF[f] && t.sets.get(set)!.elements.has(IP.parse(addr === 'saddr' ? p.saddr : p.daddr)!.toString()) && ports(p),
      'return',
      { sets: [set], maps: [] },
    );
  }
  if ((m = /^(ip6?) (saddr|daddr) \. meta l4proto \. th dport @(\S+) return$/.exec(text))) {
    const [, f, addr, set] = m;
    return R(
      (p, t) =>
        p.family === IPF[f] &&
        t.sets.get(set)!.elements.has(`${IP.parse(addr === 'saddr' ? p.saddr : p.daddr)!.toString()} . ${p.protocol} . ${p.dport}`),
      'return',
      { sets: [set], maps: [] },
    );
  }
  if ((m = /^(ip6?) (saddr|daddr) \. meta l4proto \. th dport (\{.*\}) return$/.exec(text))) {
    const [, f, addr, body] = m;
    const els = braces(body).map((e) => {
      const [a, proto, ports] = e.split(' . ');
      if (!PROTOS.has(proto)) throw new Error(`bad protocol ${proto}`);
      const r = addrRange(a);
      if (r.family !== IPF[f]) throw new Error(`family mismatch ${e}`);
      return { r, proto, ports: portRange(ports) };
    });
    noOverlap(
      els.map((e) => [
        [e.r.lo, e.r.hi],
        [protoIndex(e.proto), protoIndex(e.proto)],
        [BigInt(e.ports[0]), BigInt(e.ports[1])],
      ]),
    );
    return R((p) => {
      if (p.family !== IPF[f]) return false;
      const v = num(addr === 'saddr' ? p.saddr : p.daddr);
      return els.some((e) => e.r.lo <= v && v <= e.r.hi && e.proto === p.protocol && e.ports[0] <= p.dport && p.dport <= e.ports[1]);
    }, 'return');
  }
  if ((m = /^(ip6?) (saddr|daddr) (\{.*\}) return$/.exec(text))) {
    const [, f, addr, body] = m;
    const rs = braces(body).map(addrRange);
    if (rs.some((r) => r.family !== IPF[f])) throw new Error(`family mismatch in ${text}`);
    return R((p) => {
      if (p.family !== IPF[f]) return false;
      const v = num(addr === 'saddr' ? p.saddr : p.daddr);
      return rs.some((r) => r.lo <= v && v <= r.hi);
    }, 'return');
  }
  throw new Error(`the model does not know the rule: ${text}`);
}

/** `{ tcp . 80, udp . 1000-2000 }` as a predicate on the packet's protocol and port. */
function portSet(body: string): (p: Packet) => boolean {
  const els = braces(body).map((e) => {
    const [proto, ports] = e.split(' . ');
    if (!PROTOS.has(proto)) throw new Error(`bad protocol ${proto}`);
    return { proto, ports: portRange(ports) };
  });
  noOverlap(
    els.map((e) => [
      [protoIndex(e.proto), protoIndex(e.proto)],
      [BigInt(e.ports[0]), BigInt(e.ports[1])],
    ]),
  );
  return (p) => els.some((e) => e.proto === p.protocol && e.ports[0] <= p.dport && p.dport <= e.ports[1]);
}

function checkElement(set: NSet, e: string): string {
  const parts = e.split(' . ');
  if (parts.length !== (set.ports ? 3 : 1)) throw new Error(`element ${e} does not fit ${set.type}`);
  const ip = IP.parse(parts[0]);
  if (!ip || (set.type.startsWith('ipv4') ? ip.family !== 4 : ip.family !== 6)) throw new Error(`element ${e} does not fit ${set.type}`);
  if (set.ports && (!PROTOS.has(parts[1]) || !/^\d+$/.test(parts[2]))) throw new Error(`element ${e} does not fit ${set.type}`);
  return [ip.toString(), ...parts.slice(1)].join(' . ');
}

export class NftPolicyModel {
  table?: Table;
  /** Transactions applied (or refused). */
  applied = 0;

  /** Applies a script as one transaction; throws (leaving the state as it was) when the kernel would refuse it. */
  apply(script: string): void {
    const work = this.table ? clone(this.table) : undefined;
    let t = work;
    for (const line of script.split('\n').filter(Boolean)) t = this.line(t, line);
    if (t) this.check(t);
    this.table = t;
    this.applied++;
  }

  private line(t: Table | undefined, line: string): Table | undefined {
    let m: RegExpExecArray | null;
    const need = () => {
      if (!t) throw new Error(`No such file or directory (no table): ${line}`);
      return t;
    };
    if (line === `add table ${T}` || line.startsWith(`add table ${T} {`))
      return t ?? { counters: new Map(), sets: new Map(), maps: new Map(), chains: new Map() };
    if (line === `delete table ${T}`) {
      need();
      return undefined;
    }
    if ((m = new RegExp(`^add counter ${T} (\\S+) \\{ packets (\\d+) bytes (\\d+) ; \\}$`).exec(line))) {
      need().counters.set(m[1], Number(m[2]));
      return t;
    }
    if (
      (m = new RegExp(`^add set ${T} (\\S+) \\{ type (ipv[46]_addr( \\. inet_proto \\. inet_service)?); comment "[^"]*"; \\}$`).exec(line))
    ) {
      const tt = need();
      if (!tt.sets.has(m[1])) tt.sets.set(m[1], { type: m[2], ports: !!m[3], elements: new Set() });
      return t;
    }
    if ((m = new RegExp(`^add map ${T} (\\S+) \\{ type (ipv[46]_addr) : verdict; \\}$`).exec(line))) {
      const tt = need();
      if (!tt.maps.has(m[1])) tt.maps.set(m[1], { type: m[2], elements: new Map() });
      return t;
    }
    if ((m = new RegExp(`^(add|delete) element ${T} (\\S+) (\\{.*\\})$`).exec(line))) {
      const tt = need();
      const [, op, name, body] = m;
      const set = tt.sets.get(name);
      const map = tt.maps.get(name);
      if (!set && !map) throw new Error(`No such file or directory: ${line}`);
      for (const raw of braces(body)) {
        if (map) {
          const [key, value] = raw.split(' : ');
          const k = IP.parse(key)!.toString();
          if (op === 'delete') {
            if (!map.elements.delete(k)) throw new Error(`No such file or directory: ${raw} in ${name}`);
            continue;
          }
          const jm = /^jump (\S+)$/.exec(value ?? '');
          if (!jm || !tt.chains.has(jm[1])) throw new Error(`No such file or directory (chain): ${raw}`);
          const had = map.elements.get(k);
          if (had !== undefined && had !== jm[1]) throw new Error(`File exists: ${raw} in ${name}`);
          map.elements.set(k, jm[1]);
        } else {
          const e = checkElement(set!, raw);
          if (op === 'add') set!.elements.add(e);
          else if (!set!.elements.delete(e)) throw new Error(`No such file or directory: ${raw} in ${name}`);
        }
      }
      return t;
    }
    if ((m = new RegExp(`^add chain ${T} (\\S+)(?: \\{ (.*) \\})?$`).exec(line))) {
      const tt = need();
      const base = !!m[2] && m[2].includes('hook');
      if (!tt.chains.has(m[1])) tt.chains.set(m[1], { base, rules: [] });
      return t;
    }
    if ((m = new RegExp(`^flush chain ${T} (\\S+)$`).exec(line))) {
      const c = need().chains.get(m[1]);
      if (!c) throw new Error(`No such file or directory: ${line}`);
      c.rules = [];
      return t;
    }
    if ((m = new RegExp(`^delete (chain|set) ${T} (\\S+)$`).exec(line))) {
      const tt = need();
      const [, kind, name] = m;
      if (kind === 'chain') {
        const c = tt.chains.get(name);
        if (!c) throw new Error(`No such file or directory: ${line}`);
        if (c.rules.length) throw new Error(`Device or resource busy (not empty): ${line}`);
        for (const map of tt.maps.values())
          if ([...map.elements.values()].includes(name)) throw new Error(`Device or resource busy (jumped to): ${line}`);
        tt.chains.delete(name);
      } else {
        if (!tt.sets.has(name)) throw new Error(`No such file or directory: ${line}`);
        for (const c of tt.chains.values())
          if (c.rules.some((r) => r.refs.sets.includes(name))) throw new Error(`Device or resource busy: ${line}`);
        tt.sets.delete(name);
      }
      return t;
    }
    if ((m = new RegExp(`^add rule ${T} (\\S+) (.*)$`).exec(line))) {
      const tt = need();
      const c = tt.chains.get(m[1]);
      if (!c) throw new Error(`No such file or directory (chain): ${line}`);
      const rule = parseRule(m[2]);
      for (const s of rule.refs.sets) if (!tt.sets.has(s)) throw new Error(`No such file or directory (set ${s}): ${line}`);
      for (const s of rule.refs.maps) if (!tt.maps.has(s)) throw new Error(`No such file or directory (map ${s}): ${line}`);
      if (rule.counter && !tt.counters.has(rule.counter)) throw new Error(`No such file or directory (counter): ${line}`);
      c.rules.push(rule);
      return t;
    }
    throw new Error(`the model does not know the line: ${line}`);
  }

  private check(t: Table): void {
    for (const map of t.maps.values())
      for (const chain of map.elements.values()) if (!t.chains.has(chain)) throw new Error(`map jumps to missing chain ${chain}`);
  }

  /** The verdict the forward chain gives a packet: accept or drop (and which counter counted it). */
  evaluate(p: Packet): { verdict: 'accept' | 'drop'; counter?: string } {
    const t = this.table;
    const base = t && [...t.chains.entries()].find(([, c]) => c.base);
    if (!t || !base) return { verdict: 'accept' };
    const run = (chain: NChain): { v: Verdict; counter?: string } => {
      for (const r of chain.rules) {
        if (!r.pred(p, t)) continue;
        if (r.verdict === 'vmap') {
          const map = t.maps.get(r.vmap!.map)!;
          const key = IP.parse(r.vmap!.addr === 'saddr' ? p.saddr : p.daddr)!.toString();
          const target = map.elements.get(key);
          if (!target) continue;
          const sub = run(t.chains.get(target)!);
          if (sub.v === 'drop' || sub.v === 'accept') return sub;
          continue; // returned: on with the next rule
        }
        return { v: r.verdict, counter: r.counter };
      }
      return { v: 'return' };
    };
    const out = run(base[1]);
    return out.v === 'drop' ? { verdict: 'drop', counter: out.counter } : { verdict: 'accept' };
  }

  /** The content, comparable (sets' elements sorted, chains' rule texts, maps). */
  dump(): unknown {
    const t = this.table;
    if (!t) return undefined;
    const sorted = <V>(m: Map<string, V>) => [...m.entries()].sort(([a], [b]) => (a < b ? -1 : 1));
    return {
      sets: sorted(t.sets).map(([n, s]) => [n, s.type, [...s.elements].sort()]),
      maps: sorted(t.maps).map(([n, m]) => [n, sorted(m.elements)]),
      chains: sorted(t.chains).map(([n, c]) => [n, c.rules.map((r) => r.text)]),
    };
  }
}

function clone(t: Table): Table {
  return {
    counters: new Map(t.counters),
    sets: new Map([...t.sets].map(([k, s]) => [k, { ...s, elements: new Set(s.elements) }])),
    maps: new Map([...t.maps].map(([k, m]) => [k, { ...m, elements: new Map(m.elements) }])),
    chains: new Map([...t.chains].map(([k, c]) => [k, { base: c.base, rules: [...c.rules] }])),
  };
}
