// Schema pieces every resource shares, declared once: a timestamp, a nullable
// field, and the resource's `sequence`.

import { type TSchema, Type } from 'typebox';

export const Time = Type.String({ format: 'date-time' });

export const Nullable = <T extends TSchema>(t: T) => Type.Union([t, Type.Null()]);

export const Sequence = Type.Integer({
  minimum: 1,
  description:
    'Grows with each change of this resource: of two events about it, the one with the higher sequence is the later state',
});
