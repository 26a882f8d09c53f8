/**
 * The schema of the environment, derived from the table (variables.ts): one
 * zod parser per variable, where an empty value counts as unset and unset
 * takes the variable's default. `Env` is what it parses to.
 */
import { z } from 'zod';
import { variableSchema, type Kind } from './define';
import { VARIABLES, type VariableName } from './variables';

type ValueOf<K extends VariableName> =
  (typeof VARIABLES)[K]['value'] extends Kind<infer T> ? T : never;

const shape = Object.fromEntries(
  Object.entries(VARIABLES).map(([name, v]) => [name, variableSchema(v.value as Kind<unknown>)]),
) as unknown as { [K in VariableName]: z.ZodType<ValueOf<K>> };

/** Every variable, each parsed on its own (checks across variables: checks.ts). */
export const envSchema = z.object(shape);

/** The parsed environment: one typed value per variable. */
export type Env = z.infer<typeof envSchema>;
