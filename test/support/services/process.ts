/** The harness uses the same process helpers as `npm start` (dev/embedded). */
export * from '../../../dev/embedded/process';
