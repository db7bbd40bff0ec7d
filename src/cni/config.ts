// The network configuration on stdin: decoding and the fields every plugin shares.
import { CniError, ErrorCode, invalidConfig } from './errors';
import { requireSupported } from './version';

/** A decoded config object; plugins read their own fields from it. */
export type Json = Record<string, unknown>;

export interface NetConf extends Json {
  cniVersion: string;
  name: string;
  type: string;
}

const NETWORK_NAME_RE = /^[a-zA-Z0-9][a-zA-Z0-9_.-]*$/;

export function decodeJson(text: string, what = 'network config'): Json {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (err) {
    throw new CniError(ErrorCode.DecodingFailure, `error decoding ${what}: ${(err as Error).message}`);
  }
  if (value === null || typeof value !== 'object' || Array.isArray(value)) {
    throw new CniError(ErrorCode.DecodingFailure, `error decoding ${what}: expected a JSON object`);
  }
  return value as Json;
}

/** The version a config asks for; absent means 0.1.0, as in libcni. */
export function configVersion(conf: Json): string {
  const v = conf.cniVersion;
  if (v === undefined || v === '') return '0.1.0';
  if (typeof v !== 'string') throw new CniError(ErrorCode.DecodingFailure, 'cniVersion must be a string');
  return v;
}

export function validateNetworkName(name: unknown): string {
  if (name === undefined || name === '') throw invalidConfig('missing network name (field "name")');
  if (typeof name !== 'string') throw invalidConfig('field "name" must be a string');
  if (!NETWORK_NAME_RE.test(name)) {
    throw invalidConfig(`invalid network name ${JSON.stringify(name)}: it must match ${NETWORK_NAME_RE.source}`);
  }
  return name;
}

/** Decodes stdin into a config with a supported version and a valid name. */
export function parseNetConf(stdin: string): NetConf {
  const conf = decodeJson(stdin);
  const cniVersion = configVersion(conf);
  requireSupported(cniVersion);
  const name = validateNetworkName(conf.name);
  if (conf.type !== undefined && typeof conf.type !== 'string') throw invalidConfig('field "type" must be a string');
  return { ...conf, cniVersion, name, type: (conf.type as string | undefined) ?? '' };
}

// Small typed readers for plugin configs: each names the field it rejects.

export function optString(obj: Json, key: string, where = ''): string | undefined {
  const v = obj[key];
  if (v === undefined || v === null) return undefined;
  if (typeof v !== 'string') throw invalidConfig(`field "${where}${key}" must be a string`);
  return v;
}

export function optBool(obj: Json, key: string, where = ''): boolean | undefined {
  const v = obj[key];
  if (v === undefined || v === null) return undefined;
  if (typeof v !== 'boolean') throw invalidConfig(`field "${where}${key}" must be true or false`);
  return v;
}

export function optInt(obj: Json, key: string, min: number, max: number, where = ''): number | undefined {
  const v = obj[key];
  if (v === undefined || v === null) return undefined;
  if (typeof v !== 'number' || !Number.isInteger(v) || v < min || v > max) {
    throw invalidConfig(`field "${where}${key}" must be an integer from ${min} to ${max}, got ${JSON.stringify(v)}`);
  }
  return v;
}

export function optObject(obj: Json, key: string, where = ''): Json | undefined {
  const v = obj[key];
  if (v === undefined || v === null) return undefined;
  if (typeof v !== 'object' || Array.isArray(v)) throw invalidConfig(`field "${where}${key}" must be an object`);
  return v as Json;
}

export function optArray(obj: Json, key: string, where = ''): unknown[] | undefined {
  const v = obj[key];
  if (v === undefined || v === null) return undefined;
  if (!Array.isArray(v)) throw invalidConfig(`field "${where}${key}" must be a list`);
  return v;
}
