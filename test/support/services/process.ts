/** The harness uses the same process helpers as `npm start` (shared/embedded). */
export * from '../../../shared/embedded/process';
