// resolvConf → the result's dns, parsed as the reference parses resolv.conf.
import { readFileSync } from 'node:fs';
import { invalidConfig } from '../cni/errors';
import type { DNS } from '../cni/result';

export function parseResolvConf(file: string): DNS {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (err) {
    throw invalidConfig(`field "ipam.resolvConf": cannot read ${file}: ${(err as NodeJS.ErrnoException).code ?? err}`);
  }
  const dns: Required<DNS> = { nameservers: [], domain: '', search: [], options: [] };
  for (const raw of text.split('\n')) {
    const line = raw.trim();
    if (line === '' || line.startsWith('#') || line.startsWith(';')) continue;
    const [key, ...values] = line.split(/\s+/);
    if (values.length === 0) continue;
    if (key === 'nameserver') dns.nameservers.push(values[0]);
    else if (key === 'domain') dns.domain = values[0];
    else if (key === 'search') dns.search.push(...values);
    else if (key === 'options') dns.options.push(...values);
  }
  const out: DNS = {};
  if (dns.nameservers.length) out.nameservers = dns.nameservers;
  if (dns.domain) out.domain = dns.domain;
  if (dns.search.length) out.search = dns.search;
  if (dns.options.length) out.options = dns.options;
  return out;
}
