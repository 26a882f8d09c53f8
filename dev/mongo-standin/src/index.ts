// The package's entry point: what the service's tests and `npm start` use.
// Start a stand-in in this process with `startMongoStandin()`, or run it as
// its own process with the `mongo-standin` command (src/main.ts).
export { startMongoStandin, type MongoStandin, type MongoStandinOptions } from './server';
