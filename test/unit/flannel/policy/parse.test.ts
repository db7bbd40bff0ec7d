// Reading the API's objects: label selectors as apimachinery reads them,
// NetworkPolicy with the API's defaulting (policyTypes, a port's protocol)
// and checks (what the API would refuse, fields this daemon does not know:
// the policy fails closed and says why), Pods cut down to what policy reads.
import { describe, expect, it } from 'vitest';
import { isPortName, parsePolicy, podInfo } from '../../../../src/flannel/policy/parse';
import { EVERYTHING, matches, parseSelector } from '../../../../src/flannel/policy/selector';

const sel = (v: unknown) => parseSelector(v, 'sel');

describe('label selectors', () => {
  const l = { app: 'web', tier: 'front' };
  it.each([
    [{}, true],
    [{ matchLabels: { app: 'web' } }, true],
    [{ matchLabels: { app: 'web', tier: 'back' } }, false],
    [{ matchExpressions: [{ key: 'app', operator: 'In', values: ['db', 'web'] }] }, true],
    [{ matchExpressions: [{ key: 'app', operator: 'NotIn', values: ['web'] }] }, false],
    [{ matchExpressions: [{ key: 'missing', operator: 'NotIn', values: ['x'] }] }, true], // NotIn matches a missing key
    [{ matchExpressions: [{ key: 'missing', operator: 'In', values: ['x'] }] }, false],
    [{ matchExpressions: [{ key: 'tier', operator: 'Exists' }] }, true],
    [{ matchExpressions: [{ key: 'tier', operator: 'DoesNotExist' }] }, false],
    [{ matchExpressions: [{ key: 'missing', operator: 'DoesNotExist', values: null }] }, true],
    [{ matchLabels: { app: 'web' }, matchExpressions: [{ key: 'tier', operator: 'In', values: ['back'] }] }, false], // ANDed
  ])('%j on {app: web, tier: front}: %s', (s, want) => {
    expect(matches(sel(s), l)).toBe(want);
  });

  it('equal selectors have equal text, whatever the order they were written in; {} is everything', () => {
    const a = sel({ matchLabels: { b: '2', a: '1' }, matchExpressions: [{ key: 'c', operator: 'In', values: ['y', 'x'] }] });
    const b = sel({ matchExpressions: [{ key: 'c', operator: 'In', values: ['x', 'y'] }], matchLabels: { a: '1', b: '2' } });
    expect(a.text).toBe(b.text);
    expect(sel({})).toBe(EVERYTHING);
    expect(sel({ matchLabels: {}, matchExpressions: [] })).toBe(EVERYTHING);
  });

  it.each([
    [
      { matchExpressions: [{ key: 'a', operator: 'Gt', values: ['1'] }] },
      'sel.matchExpressions[0].operator "Gt" is not In, NotIn, Exists or DoesNotExist',
    ],
    [{ matchExpressions: [{ key: 'a', operator: 'In' }] }, 'operator In needs values'],
    [{ matchExpressions: [{ key: 'a', operator: 'Exists', values: ['x'] }] }, 'operator Exists takes no values'],
    [{ matchLabels: { a: 1 } }, 'sel.matchLabels["a"] is not a string'],
    [{ matchFields: [] }, 'sel.matchFields is not a field this daemon knows'],
    ['x', 'sel is not a label selector'],
  ])('refuses %j', (s, msg) => {
    expect(() => sel(s)).toThrow(msg);
  });
});

const policy = (spec: unknown, name = 'p') => parsePolicy({ metadata: { namespace: 'ns1', name }, spec });

describe('NetworkPolicy', () => {
  it('policyTypes defaults as the API defaults it: Ingress always, Egress when there are egress rules', () => {
    expect(policy({ podSelector: {} })).toMatchObject({ ingress: [] });
    expect(policy({ podSelector: {} }).egress).toBeUndefined();
    expect(policy({ podSelector: {}, egress: [{}] })).toMatchObject({ ingress: [], egress: [{ peers: 'all', ports: 'all' }] });
    expect(policy({ podSelector: {}, egress: [] }).egress).toBeUndefined(); // an empty list is no rule
    // given: only what it names, whatever rules there are
    const p = policy({ podSelector: {}, policyTypes: ['Egress'], ingress: [{}] });
    expect([p.ingress, p.egress]).toEqual([undefined, []]);
  });

  it('ports: protocol TCP by default, a number, a range (endPort), a name, or the whole protocol', () => {
    const p = policy({
      podSelector: {},
      ingress: [{ ports: [{ port: 80 }, { protocol: 'UDP', port: 53, endPort: 55 }, { port: 'http' }, { protocol: 'SCTP' }] }],
    });
    expect(p.problem).toBeUndefined();
    expect(p.ingress![0].ports).toEqual([
      { protocol: 'tcp', range: [80, 80] },
      { protocol: 'udp', range: [53, 55] },
      { protocol: 'tcp', name: 'http' },
      { protocol: 'sctp', range: [0, 65535] },
    ]);
  });

  it("peers: podSelector alone is the policy's namespace, namespaceSelector alone every pod there, both ANDed in one peer; ipBlock without its exceptions", () => {
    const p = policy({
      podSelector: { matchLabels: { app: 'db' } },
      ingress: [
        {
          from: [
            { podSelector: { matchLabels: { app: 'web' } } },
            { namespaceSelector: {} },
            { namespaceSelector: { matchLabels: { t: 'x' } }, podSelector: { matchLabels: { app: 'web' } } },
            { ipBlock: { cidr: '10.0.0.0/24', except: ['10.0.0.128/25', '10.0.0.0/31'] } },
          ],
        },
      ],
    });
    const [a, b, c, d] = p.ingress![0].peers as any[];
    expect(a).toMatchObject({ kind: 'pods', namespace: 'ns1' });
    expect(a.podSelector.text).toBe('{"app"="web"}');
    expect(b).toEqual({ kind: 'pods', namespaceSelector: EVERYTHING });
    expect(c.namespace).toBeUndefined();
    expect([c.namespaceSelector.text, c.podSelector.text]).toEqual(['{"t"="x"}', '{"app"="web"}']);
    expect(d).toMatchObject({ kind: 'block', family: 4, cidr: '10.0.0.0/24', except: ['10.0.0.128/25', '10.0.0.0/31'] });
    expect(d.ranges).toEqual([[0x0a000002n, 0x0a00007fn]]);
  });

  it.each([
    [
      { podSelector: {}, ingress: [{ from: [{ ipBlock: { cidr: '10.0.0/8' } }] }] },
      'spec.ingress[0].from[0].ipBlock.cidr "10.0.0/8" is not a CIDR',
    ],
    [
      { podSelector: {}, ingress: [{ from: [{ ipBlock: { cidr: '10.0.0.0/8', except: ['11.0.0.0/16'] } }] }] },
      'spec.ingress[0].from[0].ipBlock.except[0] 11.0.0.0/16 is not inside 10.0.0.0/8',
    ],
    [{ podSelector: {}, ingress: [{ from: [{ ipBlock: { cidr: '10.0.0.0/8', except: ['fd00::/64'] } }] }] }, 'is not inside'],
    [
      { podSelector: {}, ingress: [{ from: [{ ipBlock: { cidr: '10.0.0.0/8' }, podSelector: {} }] }] },
      'ipBlock cannot go with a podSelector or namespaceSelector',
    ],
    [{ podSelector: {}, ingress: [{ from: [{}] }] }, 'has no podSelector, namespaceSelector or ipBlock'],
    [{ podSelector: {}, ingress: [{ ports: [{ protocol: 'ICMP' }] }] }, 'protocol "ICMP" is not TCP, UDP or SCTP'],
    [{ podSelector: {}, ingress: [{ ports: [{ port: 0 }] }] }, 'port 0 is not a port number from 1 to 65535'],
    [{ podSelector: {}, ingress: [{ ports: [{ port: 'http', endPort: 90 }] }] }, 'endPort cannot go with a port name'],
    [{ podSelector: {}, ingress: [{ ports: [{ port: 90, endPort: 80 }] }] }, 'endPort 80 is not a port number from 90 to 65535'],
    [{ podSelector: {}, ingress: [{ ports: [{ endPort: 80 }] }] }, 'endPort needs a port'],
    [{ podSelector: {}, ingress: [{ ports: [{ port: '80' }] }] }, 'port "80" is neither a port number nor a port name'],
    [
      { podSelector: {}, ingress: [{ from: [{ podSelector: {} }], sources: [] }] },
      'spec.ingress[0].sources is not a field this daemon knows',
    ],
    [{ podSelector: {}, futureField: true }, 'spec.futureField is not a field this daemon knows'],
  ])('cannot enforce %j: fails closed (isolates, allows nothing) and says "%s"', (spec, msg) => {
    const p = policy(spec);
    expect(p.problem).toContain(msg);
    expect(p.podSelector).toBe(EVERYTHING);
    expect(p.ingress).toEqual([]);
  });

  it('policyTypes it cannot read, or a podSelector it cannot read: every direction, every pod of the namespace', () => {
    const t = policy({ podSelector: { matchLabels: { a: 'b' } }, policyTypes: ['Ingress', 'Sideways'] });
    expect(t.problem).toContain('spec.policyTypes ["Ingress","Sideways"]: each must be Ingress or Egress');
    expect([t.ingress, t.egress]).toEqual([[], []]);
    expect(t.podSelector?.text).toBe('{"a"="b"}');
    const s = policy({ podSelector: { matchExpressions: [{ key: 'a', operator: 'Gt', values: ['1'] }] }, policyTypes: ['Egress'] });
    expect(s.podSelector).toBeUndefined(); // every pod of ns1
    expect([s.ingress, s.egress]).toEqual([undefined, []]);
    expect(policy(undefined).problem).toBe('spec is not a NetworkPolicySpec');
  });

  it('port names as the API takes them (IANA_SVC_NAME)', () => {
    for (const ok of ['http', 'h2c', 'serve-80-tcp', 'a', 'x1']) expect(isPortName(ok), ok).toBe(true);
    for (const bad of ['', '80', 'HTTP', '-http', 'http-', 'a--b', 'sixteen-chars-xx', 'a_b']) expect(isPortName(bad), bad).toBe(false);
  });
});

describe('pods', () => {
  const base = {
    metadata: { namespace: 'x', name: 'a', labels: { app: 'web' }, annotations: { big: 'x'.repeat(1000) } },
    spec: {
      nodeName: 'n1',
      containers: [
        {
          name: 'c',
          image: 'i',
          ports: [{ name: 'http', containerPort: 8080 }, { containerPort: 9090 }, { name: 'dns', containerPort: 53, protocol: 'UDP' }],
        },
      ],
    },
    status: { phase: 'Running', podIPs: [{ ip: '10.0.0.5' }, { ip: 'fd00:0:0:0::5' }] },
  };

  it('keeps its namespace, name, node, labels, addresses (canonical) and named container ports only', () => {
    expect(podInfo(base)).toEqual({
      namespace: 'x',
      name: 'a',
      node: 'n1',
      labels: { app: 'web' },
      ips: ['10.0.0.5', 'fd00::5'],
      ports: [
        { name: 'http', protocol: 'tcp', port: 8080 },
        { name: 'dns', protocol: 'udp', port: 53 },
      ],
    });
  });

  it('Pending (no address yet), or with status.podIP only (older clusters)', () => {
    expect(podInfo({ ...base, status: { phase: 'Pending' } })!.ips).toEqual([]);
    expect(podInfo({ ...base, status: { podIP: '10.0.0.6' } })!.ips).toEqual(['10.0.0.6']);
  });

  it("none for a host-network pod (its addresses are the node's) or a finished one (its addresses go to others)", () => {
    expect(podInfo({ ...base, spec: { ...base.spec, hostNetwork: true } })).toBeUndefined();
    expect(podInfo({ ...base, status: { ...base.status, phase: 'Succeeded' } })).toBeUndefined();
    expect(podInfo({ ...base, status: { ...base.status, phase: 'Failed' } })).toBeUndefined();
  });
});
