// vega-lite publishes its types only through package.json "exports", which
// this project's "node" module resolution does not read; this points the
// type checker at them. (At run time, tsx loads the package itself.)
declare module 'vega-lite' {
  export * from 'vega-lite/build/index';
}
