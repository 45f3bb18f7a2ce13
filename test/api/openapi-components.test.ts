// Named schemas are hoisted into components once; two copies of one schema
// must say the same, however the document's builder has rewritten one of them.

import { describe, expect, it } from 'vitest';
import { COMPONENT_NAME } from '../../src/api/fields.js';
import { hoistComponents } from '../../src/api/openapi.js';

const named = (schema: object) => ({ ...schema, [COMPONENT_NAME]: 'Thing' });

describe('hoistComponents', () => {
  it('a copy whose const was written as a one-value enum is the same schema', () => {
    const original = named({ type: 'object', properties: { status: { const: 'saved', type: 'string' } } });
    const rewritten = named({ type: 'object', properties: { status: { type: 'string', enum: ['saved'] } } });
    const doc = hoistComponents({ paths: { a: rewritten }, webhooks: { b: original } } as { components?: object });
    expect(doc).toMatchObject({ paths: { a: { $ref: '#/components/schemas/Thing' } } });
  });

  it('two schemas that allow different things under one name are refused', () => {
    const one = named({ type: 'object', properties: { status: { const: 'saved' } } });
    const other = named({ type: 'object', properties: { status: { enum: ['saved', 'lost'] } } });
    expect(() => hoistComponents({ paths: { a: one, b: other } } as { components?: object })).toThrow(
      /two different schemas are named Thing/,
    );
  });
});
