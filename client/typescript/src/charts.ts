/**
 * The data a matplotlib figure plotted, beside its PNG: Result.chart.
 * Shaped like E2B's code-interpreter JS charts (ChartType, ScaleType,
 * LineChart, ScatterChart, BarChart, PieChart, BoxAndWhiskerChart,
 * SuperChart, with their snake_case field names, as E2B's JS SDK keeps
 * them) plus what jailcell adds: HistogramChart, UnknownChart (PNG only,
 * reason says why), and truncated on every chart. The object is the wire's
 * chart as received (docs/notebook.md "Chart data beside each figure"); the
 * host validated it, its labels are still text the sandbox wrote.
 */

import type { WireChart } from "./wire.js";

export const ChartType = {
  LINE: "line",
  SCATTER: "scatter",
  BAR: "bar",
  PIE: "pie",
  HISTOGRAM: "histogram",
  BOX_AND_WHISKER: "box_and_whisker",
  SUPERCHART: "superchart",
  UNKNOWN: "unknown",
} as const;
export type ChartType = (typeof ChartType)[keyof typeof ChartType];

export const ScaleType = {
  LINEAR: "linear",
  DATETIME: "datetime",
  CATEGORICAL: "categorical",
  LOG: "log",
  SYMLOG: "symlog",
  LOGIT: "logit",
  FUNCTION: "function",
  FUNCTIONLOG: "functionlog",
  ASINH: "asinh",
} as const;
export type ScaleType = (typeof ScaleType)[keyof typeof ScaleType];

/** What every chart has. */
export interface Chart {
  type: ChartType;
  title: string;
  elements: unknown[];
  /** Points, elements or subplots were left out (past the host's bounds). */
  truncated?: boolean;
}

export interface Chart2D extends Chart {
  x_label?: string;
  y_label?: string;
  x_unit?: string;
  y_unit?: string;
}

/** One line or scatter series: [x, y] points (a date axis: matplotlib date numbers; a categorical one: the index). */
export interface PointData {
  label: string;
  points: [number, number][];
}

export interface PointChart extends Chart2D {
  x_ticks: number[];
  x_tick_labels: string[];
  x_scale: ScaleType | string;
  y_ticks: number[];
  y_tick_labels: string[];
  y_scale: ScaleType | string;
  elements: PointData[];
}

export interface LineChart extends PointChart {
  type: "line";
}

export interface ScatterChart extends PointChart {
  type: "scatter";
}

/** One bar: its category (label), series (group) and height (value). */
export interface BarData {
  label: string;
  group: string;
  value: number;
}

export interface BarChart extends Chart2D {
  type: "bar";
  orientation?: "vertical" | "horizontal";
  stacked?: boolean;
  elements: BarData[];
}

/** One wedge: its share is angle/360. */
export interface PieData {
  label: string;
  angle: number;
  radius: number;
}

export interface PieChart extends Chart {
  type: "pie";
  elements: PieData[];
}

/** One histogram: edges has one more entry than counts. jailcell's own. */
export interface HistogramData {
  label: string;
  edges: number[];
  counts: number[];
}

export interface HistogramChart extends Chart2D {
  type: "histogram";
  elements: HistogramData[];
}

export interface BoxAndWhiskerData {
  label: string;
  min: number;
  first_quartile: number;
  median: number;
  third_quartile: number;
  max: number;
  outliers: number[];
}

export interface BoxAndWhiskerChart extends Chart2D {
  type: "box_and_whisker";
  elements: BoxAndWhiskerData[];
}

/** A figure of several subplots: one chart per subplot. */
export interface SuperChart extends Chart {
  type: "superchart";
  elements: ChartTypes[];
}

/** A figure the host could not read as a chart (an image, 3-D, contour...): PNG only. jailcell's own. */
export interface UnknownChart extends Chart {
  type: "unknown";
  reason?: string;
}

export type ChartTypes = LineChart | ScatterChart | BarChart | PieChart | HistogramChart | BoxAndWhiskerChart | SuperChart | UnknownChart;

/** The wire's chart as a ChartTypes, or undefined when it is not a chart object. */
export function toChart(v: WireChart | undefined | null): ChartTypes | undefined {
  if (v === undefined || v === null || typeof v !== "object" || typeof v.type !== "string" || !Array.isArray(v.elements)) {
    return undefined;
  }
  return v as unknown as ChartTypes;
}
