// deploy/kube-flannel.yml against flannel v0.28.9's own manifest (a copy in
// test/fixtures): object for object the same, but for the image and the
// commands that run ours; and what the issue asks of ours on top.
import { describe, expect, it } from 'vitest';
import { readFileSync } from 'node:fs';
import { loadAll } from 'js-yaml';
import { ROLE_RULES } from '../../support/kube-apiserver';

type Obj = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any
const load = (path: string) => loadAll(readFileSync(path, 'utf8')).filter(Boolean) as Obj[];
const ours = load('deploy/kube-flannel.yml');
const theirs = load('test/fixtures/flannel-v0.28.9-kube-flannel.yml');
const IMAGE = `localhost/cni-ts:${JSON.parse(readFileSync('package.json', 'utf8')).version}`;

describe('deploy/kube-flannel.yml', () => {
  it('has flannel\'s objects, in its order, with its kinds and names', () => {
    expect(ours.map((o) => `${o.kind} ${o.metadata.namespace ?? ''}/${o.metadata.name}`)).toEqual(theirs.map((o) => `${o.kind} ${o.metadata.namespace ?? ''}/${o.metadata.name}`));
  });

  it('Namespace, RBAC, ServiceAccount and ConfigMap are flannel\'s exactly', () => {
    for (let i = 0; i < ours.length; i++) if (ours[i].kind !== 'DaemonSet') expect(ours[i]).toEqual(theirs[i]);
  });

  it('the DaemonSet is flannel\'s but for the image, the commands, the architectures, the memory request and the directories the daemon reads: same probes, env, capabilities, other volumes, tolerations, priority', () => {
    const ds = ours.find((o) => o.kind === 'DaemonSet')!;
    const ref = theirs.find((o) => o.kind === 'DaemonSet')!;
    const ARCH_TERM = { key: 'kubernetes.io/arch', operator: 'In', values: ['amd64', 'arm64'] };
    const strip = (d: Obj) => {
      const c = structuredClone(d);
      for (const k of [...c.spec.template.spec.initContainers, ...c.spec.template.spec.containers]) {
        delete k.image;
        delete k.command;
        delete k.args;
        if (k.resources?.requests) delete k.resources.requests.memory;
      }
      // ours adds host-local's directory, read-only, for /metrics, and the CNI plugin's, for the leftovers of flannel's DEL
      const added = ['cni-networks', 'cni-data'];
      c.spec.template.spec.volumes = c.spec.template.spec.volumes.filter((v: Obj) => !added.includes(v.name));
      for (const k of c.spec.template.spec.containers) k.volumeMounts = k.volumeMounts.filter((m: Obj) => !added.includes(m.name));
      for (const term of c.spec.template.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms) {
        term.matchExpressions = term.matchExpressions.filter((e: Obj) => e.key !== ARCH_TERM.key);
      }
      return c;
    };
    expect(strip(ds)).toEqual(strip(ref));
    // flannel's image is built for every architecture it runs on; ours for amd64 and arm64: the pod is
    // scheduled on those only (with flannel's Linux term), never where its image could not run
    expect(ds.spec.template.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms).toEqual([
      { matchExpressions: [{ key: 'kubernetes.io/os', operator: 'In', values: ['linux'] }, ARCH_TERM] },
    ]);
    // the daemon's memory as docs/speed.md measures it, not flannel's 50Mi; the dataDir its leftovers reclaim reads
    expect(ds.spec.template.spec.containers[0].resources.requests.memory).toBe('100Mi');
    expect(ref.spec.template.spec.containers[0].resources.requests.memory).toBe('50Mi');
    expect(ds.spec.template.spec.containers[0].volumeMounts).toContainEqual({ name: 'cni-data', mountPath: '/var/lib/cni/flannel' });
    expect(ds.spec.template.spec.volumes).toContainEqual({ name: 'cni-data', hostPath: { path: '/var/lib/cni/flannel', type: 'DirectoryOrCreate' } });
    const [plugin, conf] = ds.spec.template.spec.initContainers;
    const [daemon] = ds.spec.template.spec.containers;
    expect([plugin.image, conf.image, daemon.image]).toEqual([IMAGE, IMAGE, IMAGE]);
    // the plugins live off the image's PATH: /opt/cni-ts/bin
    expect([...plugin.command, ...plugin.args]).toEqual(['/opt/cni-ts/bin/vxlan-flannel', 'install-plugin', '/opt/cni/bin', 'flannel']);
    // flannel's install-conf, with flannel's arguments
    expect([...conf.command.slice(1), ...conf.args]).toEqual(['install-conf', ...ref.spec.template.spec.initContainers[1].args]);
    // flanneld's arguments, the daemon as the first process (no shell: SIGTERM reaches it), no --release-on-exit
    expect(daemon.command).toEqual(['/opt/cni-ts/bin/vxlan-flannel', 'daemon']);
    expect(daemon.args).toEqual([...ref.spec.template.spec.containers[0].args, '--ipam-data-dir=/var/lib/cni/networks']);
    expect(daemon.args.join(' ')).not.toMatch(/release-on-exit/);
    // host-local's reservations, for flannel_pod_addresses: read-only, at the path the flag names
    expect(daemon.volumeMounts).toContainEqual({ name: 'cni-networks', mountPath: '/var/lib/cni/networks', readOnly: true });
    expect(ds.spec.template.spec.volumes).toContainEqual({ name: 'cni-networks', hostPath: { path: '/var/lib/cni/networks', type: 'DirectoryOrCreate' } });
  });
});

describe('deploy/kube-flannel.yml, --network-policy', () => {
  const text = readFileSync('deploy/kube-flannel.yml', 'utf8');
  const block = /^# BEGIN --network-policy RBAC.*\n((?:#.*\n)*?)# END --network-policy RBAC$/m.exec(text);

  it('its RBAC is a separate ClusterRole and binding, commented out: without the flag the service account has flanneld\'s permissions only', () => {
    expect(block).not.toBeNull();
    // the objects begin at the first document separator; the lines before it say what they are for
    const lines = block![1].split('\n');
    const uncommented = lines.slice(lines.indexOf('# ---')).map((l) => l.slice(2)).join('\n');
    const objects = loadAll(uncommented).filter(Boolean) as Obj[];
    expect(objects.map((o) => `${o.kind} ${o.metadata.name}`)).toEqual(['ClusterRole flannel-network-policy', 'ClusterRoleBinding flannel-network-policy']);
    // the rules are the role the stand-in API server grants in the integration tests (flannel-netpol.test.ts), where the daemon enforces with it
    expect(objects[0].rules).toEqual(ROLE_RULES['network-policy']);
    expect(objects[1].roleRef).toEqual({ apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: 'flannel-network-policy' });
    expect(objects[1].subjects).toEqual([{ kind: 'ServiceAccount', name: 'flannel', namespace: 'kube-flannel' }]);
    // the live ClusterRole is flanneld's (above: equal to flannel's manifest), and what the stand-in's flannel role grants
    expect(ours.find((o) => o.kind === 'ClusterRole')!.rules).toEqual(ROLE_RULES.flannel);
  });

  it('the flag is in the DaemonSet\'s args, commented out', () => {
    expect(text).toMatch(/ {8}- --ipam-data-dir=\/var\/lib\/cni\/networks\n {8}# .*\n {8}# - --network-policy\n/);
    expect(ours.find((o) => o.kind === 'DaemonSet')!.spec.template.spec.containers[0].args).not.toContain('--network-policy');
  });
});
