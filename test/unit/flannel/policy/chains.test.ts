// Address and port ranges, and a local pod's chain: the pieces an interval
// set is made of never overlap and say exactly what the entries say (checked
// address by address on small universes), and the chain for a pod reads as
// the union of its policies.
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { decompose, planChain, unionPorts, type PortUnion } from '../../../../src/flannel/policy/chains';
import type { Family } from '../../../../src/net/ip';
import { parsePolicy, podInfo } from '../../../../src/flannel/policy/parse';
import { addressRangeText, normalize, subtract, type Range } from '../../../../src/flannel/policy/ranges';

const range = fc
  .tuple(fc.integer({ min: 0, max: 40 }), fc.integer({ min: 0, max: 8 }))
  .map(([lo, n]) => [BigInt(lo), BigInt(lo + n)] as Range<bigint>);
const covered = (rs: readonly Range<bigint>[], v: bigint) => rs.some(([a, b]) => a <= v && v <= b);

describe('ranges', () => {
  it('normalize: sorted, disjoint, not touching, the same addresses', () => {
    fc.assert(
      fc.property(fc.array(range, { maxLength: 8 }), (rs) => {
        const n = normalize(rs);
        for (let i = 1; i < n.length; i++) expect(n[i][0]).toBeGreaterThan(n[i - 1][1] + 1n);
        for (let v = 0n; v < 50n; v++) expect(covered(n, v)).toBe(covered(rs, v));
      }),
    );
  });

  it('subtract: what is in the ranges and in no hole', () => {
    fc.assert(
      fc.property(fc.array(range, { maxLength: 5 }), fc.array(range, { maxLength: 5 }), (a, b) => {
        const s = subtract(normalize(a), normalize(b));
        for (let v = 0n; v < 50n; v++) expect(covered(s, v)).toBe(covered(a, v) && !covered(b, v));
      }),
    );
  });

  it('nft text: an address, a prefix when aligned, else lo-hi', () => {
    expect(addressRangeText(4, [0x0a000000n, 0x0a0000ffn])).toBe('10.0.0.0/24');
    expect(addressRangeText(4, [0x0a000001n, 0x0a000001n])).toBe('10.0.0.1');
    expect(addressRangeText(4, [0x0a000001n, 0x0a000002n])).toBe('10.0.0.1-10.0.0.2');
    expect(addressRangeText(6, [0n, (1n << 128n) - 1n])).toBe('::/0');
  });
});

const portUnion: fc.Arbitrary<PortUnion> = fc.oneof(
  { weight: 1, arbitrary: fc.constant('all' as const) },
  {
    weight: 4,
    arbitrary: fc
      .record({
        tcp: fc.array(
          fc.tuple(fc.integer({ min: 0, max: 10 }), fc.integer({ min: 0, max: 3 })).map(([p, n]) => [p, p + n] as Range<number>),
          { maxLength: 2 },
        ),
        udp: fc.array(
          fc.tuple(fc.integer({ min: 0, max: 10 }), fc.integer({ min: 0, max: 3 })).map(([p, n]) => [p, p + n] as Range<number>),
          { maxLength: 2 },
        ),
        sctp: fc.constant([] as Range<number>[]),
      })
      .map((p) => unionPorts(p, { tcp: [], udp: [], sctp: [] })),
  },
);

describe('decompose', () => {
  it('pieces that never overlap (as an interval set needs) and allow exactly what the entries allow', () => {
    fc.assert(
      fc.property(
        fc.array(fc.record({ ranges: fc.array(range, { minLength: 1, maxLength: 2 }).map((r) => normalize(r)), ports: portUnion }), {
          maxLength: 5,
        }),
        (entries) => {
          const { any, perPort } = decompose(entries.map((e) => ({ family: 4 as Family, ...e })));
          const boxes = [
            ...any.map((r) => ({ r, proto: '*', p: [0, 65535] })),
            ...perPort.map((e) => ({ r: e.range, proto: e.protocol, p: e.ports })),
          ];
          for (let i = 0; i < perPort.length; i++)
            for (let j = i + 1; j < perPort.length; j++) {
              const [a, b] = [perPort[i], perPort[j]];
              const overlap =
                a.protocol === b.protocol &&
                a.range[0] <= b.range[1] &&
                b.range[0] <= a.range[1] &&
                a.ports[0] <= b.ports[1] &&
                b.ports[0] <= a.ports[1];
              expect(
                overlap,
                JSON.stringify([a, b], (_, v) => (typeof v === 'bigint' ? Number(v) : v)),
              ).toBe(false);
            }
          for (let v = 0n; v < 50n; v++)
            for (const proto of ['tcp', 'udp'] as const)
              for (let port = 0; port < 15; port++) {
                const want = entries.some(
                  (e) => covered(e.ranges, v) && (e.ports === 'all' || e.ports[proto].some(([a, b]) => a <= port && port <= b)),
                );
                const got = boxes.some(
                  (b) => b.r[0] <= v && v <= b.r[1] && (b.proto === '*' || b.proto === proto) && b.p[0] <= port && port <= b.p[1],
                );
                expect(got).toBe(want);
              }
        },
      ),
    );
  });
});

describe("a local pod's chain", () => {
  const pod = podInfo({
    metadata: { namespace: 'x', name: 'a', labels: { app: 'db' } },
    spec: { nodeName: 'n1', containers: [{ ports: [{ name: 'sql', containerPort: 5432 }] }] },
    status: { podIPs: [{ ip: '10.0.0.5' }] },
  })!;
  const policy = (name: string, spec: unknown) => parsePolicy({ metadata: { namespace: 'x', name }, spec });

  it('the union of the policies: one rule per peer group with its ports merged, ingress ports by name resolved on the pod, the drop counted', () => {
    const p1 = policy('p1', {
      podSelector: {},
      ingress: [{ from: [{ podSelector: { matchLabels: { app: 'web' } } }], ports: [{ port: 'sql' }] }],
    });
    const p2 = policy('p2', {
      podSelector: {},
      ingress: [
        { from: [{ podSelector: { matchLabels: { app: 'web' } } }], ports: [{ port: 5433 }, { port: 'nosuch' }] },
        { from: [{ ipBlock: { cidr: '192.168.0.0/16', except: ['192.168.1.0/24'] } }] },
      ],
    });
    const plan = planChain('ingress', pod, [p1, p2], [4]);
    expect(plan.text).toEqual([
      'ip saddr { 192.168.0.0/24, 192.168.2.0-192.168.255.255 } return',
      expect.stringMatching(/^ip saddr @p-[0-9a-f]{16}-4 meta l4proto \. th dport \{ tcp \. 5432-5433 \} return$/),
      'counter name "ingress-dropped" drop',
    ]);
    expect([...plan.groups.keys()]).toEqual(['pods in "x" pod {"app"="web"}']);
  });

  it('a policy that allows nothing (deny all) leaves the drop alone; one that allows everything, one rule', () => {
    expect(planChain('egress', pod, [policy('deny', { podSelector: {}, policyTypes: ['Egress'] })], [4, 6]).text).toEqual([
      'counter name "egress-dropped" drop',
    ]);
    const all = policy('all', { podSelector: {}, ingress: [{}, { from: [{ podSelector: {} }] }] });
    expect(planChain('ingress', pod, [all], [4]).text).toEqual(['meta nfproto ipv4 return', 'counter name "ingress-dropped" drop']);
  });

  it("egress ports by name: a group of the destinations' (address, protocol, port), per peer", () => {
    const p = policy('e', {
      podSelector: {},
      policyTypes: ['Egress'],
      egress: [
        { to: [{ namespaceSelector: {} }, { ipBlock: { cidr: '10.0.0.0/8' } }], ports: [{ port: 'sql' }, { port: 53, protocol: 'UDP' }] },
      ],
    });
    const plan = planChain('egress', pod, [p], [4]);
    expect(plan.text).toEqual([
      expect.stringMatching(/^ip daddr @p-\w+-4 meta l4proto \. th dport \{ udp \. 53 \} return$/),
      'ip daddr . meta l4proto . th dport { 10.0.0.0/8 . udp . 53 } return',
      expect.stringMatching(/^ip daddr \. meta l4proto \. th dport @n-\w+-4 return$/),
      expect.stringMatching(/^ip daddr \. meta l4proto \. th dport @n-\w+-4 return$/),
      'counter name "egress-dropped" drop',
    ]);
    expect([...plan.groups.keys()].sort()).toEqual(['pods in 10.0.0.0/8 port tcp/sql', 'pods ns {}', 'pods ns {} port tcp/sql']);
  });
});
