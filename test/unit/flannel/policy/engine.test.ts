// The policy engine against the API's definition (decide.ts) and against
// itself: random clusters (pods, namespaces, policies from a small universe
// so that selectors, blocks and ports overlap often) changed one object at a
// time, each batch of changes applied to a model of the kernel's table
// (test/support/nft-policy-model.ts, which refuses what the kernel refuses).
// After every change sequence:
//   - the table built change by change is the table a fresh start builds;
//   - every packet between any two endpoints (pods, bare addresses; both
//     families; TCP, UDP, SCTP; a spread of ports) gets the verdict the API's
//     definition gives for this node's side of it.
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { PolicyEngine, type Changes } from '../../../../src/flannel/policy/engine';
import { changesScript, fullScript } from '../../../../src/flannel/policy/nft';
import { parsePolicy, podInfo } from '../../../../src/flannel/policy/parse';
import { sideVerdict, type ClusterView, type Endpoint } from '../../../../src/flannel/policy/decide';
import { familyOf, podKey, type PodInfo, type Policy, type Protocol } from '../../../../src/flannel/policy/model';
import { NftPolicyModel } from '../../../support/nft-policy-model';

const NODE = 'n1';
const NAMESPACES = ['x', 'y', 'z'];
const PODS = 6;
const PORTS = [53, 79, 80, 81, 82, 8080];
const PROTOCOLS: Protocol[] = ['tcp', 'udp', 'sctp'];
/** Addresses no pod holds (bare endpoints: matched by ipBlock only). */
const BARE = ['10.0.0.30', 'fd00::1e', '10.0.1.5'];

const v4 = (i: number) => `10.0.0.${i}`;
const v6 = (i: number) => `fd00::${i.toString(16)}`;

// ---- generators ----

const labelValue = fc.constantFrom('a', 'b', 'c');
const labels = fc.record({ app: labelValue, tier: labelValue, extra: labelValue }, { requiredKeys: [] });
const selector = fc.oneof(
  fc.constant({}),
  fc.record({ matchLabels: labels }),
  fc.record({
    matchExpressions: fc.array(
      fc.oneof(
        fc.record({
          key: fc.constantFrom('app', 'tier', 'ns'),
          operator: fc.constantFrom('In', 'NotIn'),
          values: fc.array(labelValue, { minLength: 1, maxLength: 2 }),
        }),
        fc.record({ key: fc.constantFrom('app', 'tier', 'ns'), operator: fc.constantFrom('Exists', 'DoesNotExist') }),
      ),
      { maxLength: 2 },
    ),
  }),
);
const nsSelector = fc.oneof(
  fc.constant({}),
  fc.record({ matchLabels: fc.record({ ns: fc.constantFrom(...NAMESPACES), team: labelValue }, { requiredKeys: [] }) }),
);
const cidr = fc.oneof(
  fc.tuple(fc.integer({ min: 0, max: 31 }), fc.integer({ min: 27, max: 32 })).map(([i, l]) => `10.0.0.${i}/${l}`),
  fc.tuple(fc.integer({ min: 0, max: 31 }), fc.integer({ min: 123, max: 128 })).map(([i, l]) => `fd00::${i.toString(16)}/${l}`),
  fc.constantFrom('0.0.0.0/0', '::/0', '10.0.0.0/8'),
);
const ipBlock = cidr.chain((c) => {
  const [addr, len] = c.split('/');
  const v6 = addr.includes(':');
  // exceptions inside the block: the block's own address with a longer prefix, or another address of it
  const max = v6 ? 128 : 32;
  if (Number(len) >= max) return fc.constant({ cidr: c });
  return fc.record({
    cidr: fc.constant(c),
    except: fc.array(
      fc.integer({ min: Number(len) + 1, max }).map((l) => `${addr}/${l}`),
      { maxLength: 2 },
    ),
  });
});
const peer = fc.oneof(
  fc.record({ podSelector: selector }),
  fc.record({ namespaceSelector: nsSelector }),
  fc.record({ podSelector: selector, namespaceSelector: nsSelector }),
  fc.record({ ipBlock }),
);
const port = fc.oneof(
  fc.record({ protocol: fc.constantFrom('TCP', 'UDP', 'SCTP'), port: fc.constantFrom(...PORTS) }, { requiredKeys: ['port'] }),
  fc.record(
    { protocol: fc.constantFrom('TCP', 'UDP'), port: fc.constantFrom(79, 80), endPort: fc.constantFrom(81, 82) },
    { requiredKeys: ['port', 'endPort'] },
  ),
  fc.record({ protocol: fc.constantFrom('TCP', 'UDP', 'SCTP') }),
  fc.record({ protocol: fc.constantFrom('TCP', 'UDP'), port: fc.constantFrom('http', 'dns', 'alt') }, { requiredKeys: ['port'] }),
);
const rule = (peers: 'from' | 'to') =>
  fc.record({ [peers]: fc.array(peer, { maxLength: 3 }), ports: fc.array(port, { maxLength: 3 }) }, { requiredKeys: [] });
const policyObject = fc.record({
  ns: fc.constantFrom(...NAMESPACES),
  name: fc.constantFrom('p1', 'p2', 'p3', 'p4'),
  spec: fc.record(
    {
      podSelector: selector,
      policyTypes: fc.constantFrom(['Ingress'], ['Egress'], ['Ingress', 'Egress']),
      ingress: fc.array(rule('from'), { maxLength: 3 }),
      egress: fc.array(rule('to'), { maxLength: 3 }),
    },
    { requiredKeys: ['podSelector'] },
  ),
});
const namedPorts = fc
  .subarray([
    { name: 'http', containerPort: 80 },
    { name: 'dns', containerPort: 53, protocol: 'UDP' },
    { name: 'alt', containerPort: 8080 },
    { name: 'alt', containerPort: 81, protocol: 'UDP' },
  ])
  .filter((ps) => new Set(ps.map((p) => p.name)).size === ps.length);
const podObject = fc.record({
  i: fc.integer({ min: 0, max: PODS - 1 }),
  ns: fc.constantFrom(...NAMESPACES),
  labels,
  node: fc.constantFrom('n1', 'n1', 'n2'),
  // which of its two addresses per family it holds (none: Pending)
  addr: fc.constantFrom('first', 'second', 'none', 'v4only'),
  ports: namedPorts,
  http: fc.constantFrom(80, 8080), // what "http" is on this pod
});

type ArbValue<A> = A extends fc.Arbitrary<infer T> ? T : never;
type PodObject = ArbValue<typeof podObject>;
type PolicyObject = ArbValue<typeof policyObject>;

type Op =
  | { kind: 'pod'; v: PodObject }
  | { kind: 'podGone'; i: number }
  | { kind: 'ns'; name: string; team?: string }
  | { kind: 'nsGone'; name: string }
  | { kind: 'policy'; v: PolicyObject }
  | { kind: 'policyGone'; ns: string; name: string }
  | { kind: 'take' }
  | { kind: 'snapshot' };

const op: fc.Arbitrary<Op> = fc.oneof(
  { weight: 4, arbitrary: podObject.map((v) => ({ kind: 'pod' as const, v })) },
  { weight: 1, arbitrary: fc.integer({ min: 0, max: PODS - 1 }).map((i) => ({ kind: 'podGone' as const, i })) },
  {
    weight: 2,
    arbitrary: fc
      .record({ name: fc.constantFrom(...NAMESPACES), team: labelValue }, { requiredKeys: ['name'] })
      .map((v) => ({ kind: 'ns' as const, ...v })),
  },
  { weight: 1, arbitrary: fc.constantFrom(...NAMESPACES).map((name) => ({ kind: 'nsGone' as const, name })) },
  { weight: 4, arbitrary: policyObject.map((v) => ({ kind: 'policy' as const, v })) },
  {
    weight: 1,
    arbitrary: fc
      .record({ ns: fc.constantFrom(...NAMESPACES), name: fc.constantFrom('p1', 'p2', 'p3', 'p4') })
      .map((v) => ({ kind: 'policyGone' as const, ...v })),
  },
  { weight: 3, arbitrary: fc.constant({ kind: 'take' as const }) },
  { weight: 1, arbitrary: fc.constant({ kind: 'snapshot' as const }) },
);

const start = fc.record({
  pods: fc.array(podObject, { minLength: PODS, maxLength: PODS }),
  policies: fc.array(policyObject, { minLength: 1, maxLength: 4 }),
  teams: fc.array(labelValue, { minLength: NAMESPACES.length, maxLength: NAMESPACES.length }),
});

// ---- the world the ops build ----

class World implements ClusterView {
  readonly pods = new Map<number, PodInfo>();
  readonly namespaces = new Map<string, Record<string, string>>();
  readonly policies = new Map<string, Policy>();

  policiesIn(ns: string): Policy[] {
    return [...this.policies.entries()]
      .filter(([, p]) => p.namespace === ns)
      .sort(([a], [b]) => (a < b ? -1 : 1))
      .map(([, p]) => p);
  }

  namespaceLabels(ns: string) {
    return this.namespaces.get(ns);
  }

  endpoints(): Endpoint[] {
    const out: Endpoint[] = BARE.map((ip) => ({ ip }));
    for (const pod of this.pods.values()) for (const ip of pod.ips) out.push({ ip, pod });
    return out;
  }
}

function apply(o: Op, world: World, engine: PolicyEngine, kernel: NftPolicyModel): void {
  switch (o.kind) {
    case 'pod': {
      const { i, ns, labels, node, addr, ports, http } = o.v;
      const old = world.pods.get(i);
      if (old && old.namespace !== ns) {
        // a pod's namespace never changes: the old one goes first
        engine.setPod(podKey(old), undefined);
        world.pods.delete(i);
      }
      const n = addr === 'second' ? i + 16 : i + 1;
      const podIPs = addr === 'none' ? [] : addr === 'v4only' ? [{ ip: v4(n) }] : [{ ip: v4(n) }, { ip: v6(n) }];
      const pod = podInfo({
        metadata: { namespace: ns, name: `pod${i}`, labels },
        spec: {
          nodeName: node,
          containers: [
            { ports: ports.map((p: { name: string; containerPort: number }) => (p.name === 'http' ? { ...p, containerPort: http } : p)) },
          ],
        },
        status: { podIPs },
      })!;
      world.pods.set(i, pod);
      engine.setPod(podKey(pod), pod);
      return;
    }
    case 'podGone': {
      const old = world.pods.get(o.i);
      world.pods.delete(o.i);
      if (old) engine.setPod(podKey(old), undefined);
      return;
    }
    case 'ns': {
      const l = { ns: o.name, ...(o.team ? { team: o.team } : {}) };
      world.namespaces.set(o.name, l);
      engine.setNamespace(o.name, l);
      return;
    }
    case 'nsGone':
      world.namespaces.delete(o.name);
      engine.setNamespace(o.name, undefined);
      return;
    case 'policy': {
      const p = parsePolicy({ metadata: { namespace: o.v.ns, name: o.v.name }, spec: o.v.spec });
      world.policies.set(`${o.v.ns}/${o.v.name}`, p);
      engine.setPolicy(`${o.v.ns}/${o.v.name}`, p);
      return;
    }
    case 'policyGone':
      world.policies.delete(`${o.ns}/${o.name}`);
      engine.setPolicy(`${o.ns}/${o.name}`, undefined);
      return;
    case 'take': {
      const c: Changes = engine.takeChanges();
      kernel.apply(changesScript(c));
      return;
    }
    case 'snapshot':
      kernel.apply(fullScript(engine.snapshot()));
      return;
  }
}

/** Every packet's verdict on the node against the definition (only this node's pods' sides are its to enforce). */
function checkVerdicts(world: World, kernel: NftPolicyModel): void {
  const eps = world.endpoints();
  for (const from of eps) {
    for (const to of eps) {
      if (familyOf(from.ip) !== familyOf(to.ip) || from.ip === to.ip) continue;
      for (const protocol of PROTOCOLS) {
        for (const port of PORTS) {
          const local = (e: Endpoint) => e.pod?.node === NODE;
          const egress = local(from) ? sideVerdict('egress', from, to, protocol, port, world).allowed : true;
          const ingress = local(to) ? sideVerdict('ingress', to, from, protocol, port, world).allowed : true;
          const got = kernel.evaluate({ family: familyOf(from.ip), saddr: from.ip, daddr: to.ip, protocol, dport: port });
          const want = egress && ingress ? 'accept' : 'drop';
          if (got.verdict !== want) {
            throw new Error(
              `${from.pod ? podKey(from.pod) : 'bare'} ${from.ip} -> ${to.pod ? podKey(to.pod) : 'bare'} ${to.ip} ${protocol}/${port}: ` +
                `the table says ${got.verdict}, the definition ${want} (egress ${egress}, ingress ${ingress})\n${JSON.stringify(kernel.dump(), null, 1)}`,
            );
          }
          // a reply of a connection passes whatever the policies say
          expect(
            kernel.evaluate({ family: familyOf(from.ip), saddr: from.ip, daddr: to.ip, protocol, dport: port, reply: true }).verdict,
          ).toBe('accept');
          if (got.verdict === 'drop') expect(got.counter).toBe(local(from) && !egress ? 'egress-dropped' : 'ingress-dropped');
        }
      }
    }
  }
}

describe("the policy engine, change by change, against the API's definition", () => {
  it("builds, change by change, the table a fresh start builds, and every packet gets the definition's verdict", () => {
    fc.assert(
      fc.property(start, fc.array(op, { minLength: 1, maxLength: 30 }), ({ pods, policies, teams }, ops) => {
        const world = new World();
        const engine = new PolicyEngine(NODE);
        const kernel = new NftPolicyModel();
        // a populated cluster to begin with (policies find pods to select and peers to allow), then changes
        for (const [k, name] of NAMESPACES.entries()) apply({ kind: 'ns', name, team: teams[k] }, world, engine, kernel);
        for (const [i, v] of pods.entries()) apply({ kind: 'pod', v: { ...v, i } }, world, engine, kernel);
        for (const v of policies) apply({ kind: 'policy', v }, world, engine, kernel);
        kernel.apply(fullScript(engine.snapshot()));
        for (const o of ops) apply(o, world, engine, kernel);
        kernel.apply(changesScript(engine.takeChanges()));

        // a fresh start from the final state
        const fresh = new PolicyEngine(NODE);
        for (const [name, l] of world.namespaces) fresh.setNamespace(name, l);
        for (const pod of world.pods.values()) fresh.setPod(podKey(pod), pod);
        for (const [key, p] of world.policies) fresh.setPolicy(key, p);
        const again = new NftPolicyModel();
        again.apply(fullScript(fresh.snapshot()));
        expect(kernel.dump()).toEqual(again.dump());

        checkVerdicts(world, kernel);
      }),
      { numRuns: 400 },
    );
  });

  it('a batch with nothing in it is no transaction', () => {
    const engine = new PolicyEngine(NODE);
    engine.snapshot();
    expect(changesScript(engine.takeChanges())).toBe('');
    const pod = podInfo({ metadata: { namespace: 'x', name: 'a' }, spec: { nodeName: 'n2' }, status: { podIPs: [{ ip: '10.0.0.1' }] } })!;
    engine.setPod('x/a', pod); // a pod of another node that no group holds
    expect(changesScript(engine.takeChanges())).toBe('');
  });
});
