// A small client for the customer API, and accounts made the way the CLI makes them.

import type pg from 'pg';
import { accountCreate, apiKeyCreate } from '../../src/accounts/accounts.js';
import { withTx } from '../../src/db/tx.js';

export interface ApiResponse {
  status: number;
  json: any; // eslint-disable-line @typescript-eslint/no-explicit-any
  headers: Headers;
}

export interface ApiClient {
  accountId: string;
  key: string;
  get(path: string): Promise<ApiResponse>;
  post(path: string, body?: unknown, headers?: Record<string, string>): Promise<ApiResponse>;
  patch(path: string, body: unknown): Promise<ApiResponse>;
  delete(path: string): Promise<ApiResponse>;
}

export async function request(
  baseUrl: string,
  method: string,
  path: string,
  key: string | null,
  body?: unknown,
  headers: Record<string, string> = {},
): Promise<ApiResponse> {
  const res = await fetch(baseUrl + path, {
    method,
    headers: {
      ...(key ? { authorization: `Bearer ${key}` } : {}),
      ...(body !== undefined ? { 'content-type': 'application/json' } : {}),
      ...headers,
    },
    ...(body !== undefined ? { body: typeof body === 'string' ? body : JSON.stringify(body) } : {}),
  });
  const text = await res.text();
  let json: unknown = null;
  try {
    json = text ? JSON.parse(text) : null;
  } catch {
    json = text;
  }
  return { status: res.status, json, headers: res.headers };
}

export async function createAccount(pool: pg.Pool, baseUrl: string, name = 'Test account'): Promise<ApiClient> {
  const { accountId, key } = await withTx(pool, async (tx) => {
    const account = await accountCreate(tx, name);
    return { accountId: account.id, key: (await apiKeyCreate(tx, account.id)).key };
  });
  return {
    accountId,
    key,
    get: (path) => request(baseUrl, 'GET', path, key),
    post: (path, body, headers) => request(baseUrl, 'POST', path, key, body, headers),
    patch: (path, body) => request(baseUrl, 'PATCH', path, key, body),
    delete: (path) => request(baseUrl, 'DELETE', path, key),
  };
}
