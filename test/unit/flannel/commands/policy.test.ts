// `vxlan-flannel policy`: against the stand-in API server, the policies that
// select a pod and what they allow, peers resolved to pods and ports by name
// resolved where they are; a connection's verdict with who allows or drops it.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { formatPolicyAnswer, policyAnswer } from '../../../../src/flannel/commands/policy';
import { KubeApiServer, startKubeApiServer } from '../../../support/kube-apiserver';

describe('vxlan-flannel policy', () => {
  let s: KubeApiServer;
  const pod = (ns: string, name: string, ip: string, labels: Record<string, string>, extra: object = {}) =>
    s.create('pods', {
      metadata: { namespace: ns, name, labels },
      spec: { nodeName: 'n1', containers: [{ name: 'c', ports: [{ name: 'sql', containerPort: 5432 }] }], ...extra },
      status: { phase: 'Running', podIPs: [{ ip }] },
    });

  beforeAll(async () => {
    s = await startKubeApiServer();
    for (const ns of ['db', 'web'])
      await s.create('namespaces', { metadata: { name: ns, labels: { team: ns === 'web' ? 'blue' : 'red' } } });
    await pod('db', 'pg', '10.0.0.1', { app: 'pg' });
    await pod('web', 'front', '10.0.0.2', { app: 'front' });
    await pod('web', 'batch', '10.0.0.3', { app: 'batch' });
    await pod('web', 'hostnet', '192.168.0.9', { app: 'front' }, { hostNetwork: true });
    await s.create('networkpolicies', {
      metadata: { namespace: 'db', name: 'pg-from-front' },
      spec: {
        podSelector: { matchLabels: { app: 'pg' } },
        ingress: [
          {
            from: [
              { namespaceSelector: { matchLabels: { team: 'blue' } }, podSelector: { matchLabels: { app: 'front' } } },
              { ipBlock: { cidr: '192.168.0.0/16', except: ['192.168.1.0/24'] } },
            ],
            ports: [{ port: 'sql' }],
          },
        ],
      },
    });
    await s.create('networkpolicies', {
      metadata: { namespace: 'db', name: 'broken' },
      spec: { podSelector: { matchLabels: { app: 'other' } }, ingress: [{ ports: [{ protocol: 'ICMP' }] }] },
    });
  });
  afterAll(() => s.stop());

  it('shows the pod, the policies isolating it and what each allows (peers resolved, ports by name resolved on the pod)', async () => {
    const a = await policyAnswer({ apiUrl: s.url }, { pod: 'db/pg' });
    expect(formatPolicyAnswer(a)).toBe(
      [
        'pod db/pg on node n1: 10.0.0.1',
        '  labels app=pg; named ports sql tcp/5432',
        'ingress: isolated by 1 policy; what no rule below allows is dropped',
        '  db/pg-from-front',
        '    from pods of namespaces matching team=blue matching app=front: web/front',
        '    from addresses in 192.168.0.0/16 except 192.168.1.0/24',
        '      on tcp/sql = 5432',
        'egress: open (no policy isolates it)',
        '',
      ].join('\n'),
    );
  });

  it('--from --port: the verdict and who gives it', async () => {
    const allowed = formatPolicyAnswer(await policyAnswer({ apiUrl: s.url }, { pod: 'db/pg', from: 'web/front', port: 'tcp/5432' }));
    expect(allowed).toContain(
      'web/front -> db/pg tcp/5432: ALLOWED\n  egress of web/front: open\n  ingress of db/pg: allowed by db/pg-from-front\n',
    );
    const dropped = formatPolicyAnswer(await policyAnswer({ apiUrl: s.url }, { pod: 'db/pg', from: 'web/batch', port: '5432' }));
    expect(dropped).toContain(
      'web/batch -> db/pg tcp/5432: DROPPED\n  egress of web/batch: open\n  ingress of db/pg: dropped (isolated by db/pg-from-front; no rule allows it)\n',
    );
    // an address: only the ipBlock speaks for it; a host-network pod is its node's address
    expect((await policyAnswer({ apiUrl: s.url }, { pod: 'db/pg', from: '192.168.0.9', port: 'tcp/5432' })).connection?.allowed).toBe(true);
    expect((await policyAnswer({ apiUrl: s.url }, { pod: 'db/pg', from: '192.168.1.9', port: 'tcp/5432' })).connection?.allowed).toBe(
      false,
    );
  });

  it('a policy that cannot be enforced says so; a pod that policy does not apply to, or a bad --port, is refused with why', async () => {
    await pod('db', 'other', '10.0.0.4', { app: 'other' });
    expect(formatPolicyAnswer(await policyAnswer({ apiUrl: s.url }, { pod: 'db/other' }))).toContain(
      '  db/broken CANNOT BE ENFORCED (spec.ingress[0].ports[0].protocol "ICMP" is not TCP, UDP or SCTP): allows nothing\n',
    );
    await expect(policyAnswer({ apiUrl: s.url }, { pod: 'web/hostnet' })).rejects.toThrow(
      "no pod web/hostnet that policy applies to (none by that name, or it is on the host's network, or it has finished)",
    );
    await expect(policyAnswer({ apiUrl: s.url }, { pod: 'db/pg', from: 'web/front', port: 'icmp/1' })).rejects.toThrow(
      '--port "icmp/1": give protocol/port',
    );
    await expect(policyAnswer({ apiUrl: s.url }, { pod: 'db/pg', from: 'web/front' })).rejects.toThrow('--from needs --port');
  });
});
