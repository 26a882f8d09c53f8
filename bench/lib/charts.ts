/**
 * Charts for the benchmark page: Vega-Lite specifications (data inline, so
 * results.json carries everything needed to redraw them) rendered to SVG by
 * Vega without a browser or canvas.
 */
import type { TopLevelSpec } from 'vega-lite';

const WIDTH = 520;
const HEIGHT = 260;
const FONT = 'Helvetica, Arial, sans-serif';
const config = {
  font: FONT,
  axis: { labelFontSize: 11, titleFontSize: 12 },
  legend: { labelFontSize: 11, orient: 'bottom' as const, title: null, labelLimit: 0, columns: 2 },
  title: { fontSize: 14, anchor: 'start' as const },
};

/** What every chart shares: the schema, its title, its size and the look. */
function frame(title: string) {
  return {
    $schema: 'https://vega.github.io/schema/vega-lite/v6.json',
    title,
    width: WIDTH,
    height: HEIGHT,
    config,
  };
}

export interface Rule {
  y: number;
  label: string;
}

function ruleLayers(rules: Rule[]) {
  if (rules.length === 0) return [];
  return [
    {
      data: { values: rules },
      mark: { type: 'rule' as const, strokeDash: [5, 4], color: '#c0392b' },
      encoding: { y: { field: 'y', type: 'quantitative' as const } },
    },
    {
      data: { values: rules },
      mark: {
        type: 'text' as const,
        align: 'right' as const,
        baseline: 'bottom' as const,
        dy: -2,
        color: '#c0392b',
        fontSize: 10,
        x: 'width' as const,
      },
      encoding: {
        y: { field: 'y', type: 'quantitative' as const },
        text: { field: 'label', type: 'nominal' as const },
      },
    },
  ];
}

/**
 * Grouped bars: one group per `group`, one bar per `series`, the bar at the
 * median and a line over the runs' min-max; dashed lines for targets.
 */
export function bars(options: {
  title: string;
  data: { group: string; series: string; median: number; min: number; max: number }[];
  yTitle: string;
  rules?: Rule[];
  /** d3 format of the value printed over each bar (default ".1f"). */
  format?: string;
}): TopLevelSpec {
  const x = {
    field: 'group',
    type: 'nominal' as const,
    title: null,
    sort: null,
    axis: { labelAngle: 0 },
  };
  const xOffset = { field: 'series', type: 'nominal' as const, sort: null };
  const color = { field: 'series', type: 'nominal' as const, sort: null };
  return {
    ...frame(options.title),
    layer: [
      {
        data: { values: options.data },
        mark: { type: 'bar' },
        encoding: {
          x,
          xOffset,
          color,
          y: { field: 'median', type: 'quantitative', title: options.yTitle },
        },
      },
      {
        data: { values: options.data },
        mark: { type: 'rule', color: '#333' },
        encoding: {
          x,
          xOffset,
          y: { field: 'min', type: 'quantitative' },
          y2: { field: 'max' },
        },
      },
      {
        data: { values: options.data },
        mark: { type: 'text', dy: -7, fontSize: 10 },
        encoding: {
          x,
          xOffset,
          y: { field: 'max', type: 'quantitative' },
          text: { field: 'median', type: 'quantitative', format: options.format ?? '.1f' },
        },
      },
      ...ruleLayers(options.rules ?? []),
    ],
  };
}

/** Lines (with points) per `series` over a quantitative x; dashed lines for targets. */
export function lines(options: {
  title: string;
  data: { x: number; y: number; series: string }[];
  xTitle: string;
  yTitle: string;
  rules?: Rule[];
  xLog?: boolean;
  /** Whole-number ticks on x (counts). */
  xInteger?: boolean;
  points?: boolean;
}): TopLevelSpec {
  return {
    ...frame(options.title),
    layer: [
      {
        data: { values: options.data },
        mark: { type: 'line', point: options.points ?? false, interpolate: 'linear' },
        encoding: {
          x: {
            field: 'x',
            type: 'quantitative',
            title: options.xTitle,
            scale: options.xLog ? { type: 'log' } : { zero: true },
            ...(options.xInteger ? { axis: { tickMinStep: 1, format: 'd' } } : {}),
          },
          y: { field: 'y', type: 'quantitative', title: options.yTitle },
          color: { field: 'series', type: 'nominal', sort: null },
        },
      },
      ...ruleLayers(options.rules ?? []),
    ],
  };
}

/** Renders a Vega-Lite specification to an SVG document. */
export async function renderSvg(spec: TopLevelSpec): Promise<string> {
  // Both packages are ESM-only with top-level await inside (vega-canvas), so
  // they are loaded with import(), which this CommonJS build keeps as is under tsx.
  const vl = await import('vega-lite');
  const vega = await import('vega');
  const view = new vega.View(vega.parse(vl.compile(spec).spec), { renderer: 'none' });
  try {
    return await view.toSVG();
  } finally {
    view.finalize();
  }
}
