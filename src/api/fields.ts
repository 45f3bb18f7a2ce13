// Schema pieces every resource shares, declared once: a timestamp, a nullable
// field, the resource's `sequence`, and the name a schema goes by in the
// OpenAPI document.

import { type TSchema, Type } from 'typebox';

export const Time = Type.String({ format: 'date-time' });

export const Nullable = <T extends TSchema>(t: T) => Type.Union([t, Type.Null()]);

export const Sequence = Type.Integer({
  minimum: 1,
  description:
    'Grows with each change of this resource: of two events about it, the one with the higher sequence is the later state',
});

/** The marker `named` sets; the OpenAPI document hoists what carries it into components.schemas (openapi.ts). */
export const COMPONENT_NAME = 'x-component';

/** Names a schema: the OpenAPI document shows it once in components.schemas and refers to it everywhere else. */
export function named<T extends TSchema>(name: string, schema: T): T {
  return Object.assign(schema, { [COMPONENT_NAME]: name });
}
