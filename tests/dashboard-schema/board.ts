// The type every file in dashboards/ must have: Grafana's dashboard schema as @grafana/schema
// publishes it (the `Dashboard`, `Panel`, `RowPanel` and `VariableModel` types, and the options
// and field config of each panel plugin the boards use), narrowed where the schema leaves a
// field open. tests/it/dashboards_schema.rs writes each board as
// `export const board: Board = <the file>;` and runs `tsc --noEmit --strict` on it: a field of
// the wrong type, a value outside an enum, a missing required field or a property the schema
// does not know (TypeScript's excess-property check on object literals) is an error.
//
// Where this file departs from the schema, and why:
// * Enums: the schema declares TypeScript enums (`ThresholdsMode.Absolute`), which a JSON string
//   cannot be; `Json` below turns every string enum into the union of its values ("absolute" |
//   "percentage"). Numeric enums stay: a number literal must be one of their values.
// * Panels: the schema's `Panel` has `type: string`, `options: Record<string, unknown>` and
//   untyped targets. Here a panel is one of the plugins below, its options and custom field
//   config are that plugin's (`@grafana/schema`'s panelcfg types), and its targets are
//   Prometheus queries. A new panel type needs its line in `Panel`.
// * Plugin options and custom field config are `Partial` at their top level: Grafana fills in
//   the plugin's defaults for options a board leaves out (a board written for Grafana 10 has
//   no `percentChangeColorMode`). Their nested objects (a legend, a tooltip, thresholds) are
//   checked as the schema declares them.
// * Prometheus queries and query variables: @grafana/schema has no Prometheus types (Grafana's
//   Prometheus package is AGPL and not used here); `PromQuery` and `PromVariableQuery` are
//   ours, the fields Grafana's Prometheus query editor saves.
// * `definition` on query variables: Grafana's variable editor saves the query's text there
//   (QueryVariableModel in @grafana/data), and tests/it/dashboards.rs compares it with the
//   query; the schema's VariableModel lacks it.
// Left open, as in the schema: the values of field config overrides (`unknown`) and
// transformation options.

import type * as S from '@grafana/schema';
import type * as BarGauge from '@grafana/schema/dist/esm/raw/composable/bargauge/panelcfg/x/BarGaugePanelCfg_types.gen';
import type * as Stat from '@grafana/schema/dist/esm/raw/composable/stat/panelcfg/x/StatPanelCfg_types.gen';
import type * as StateTimeline from '@grafana/schema/dist/esm/raw/composable/statetimeline/panelcfg/x/StateTimelinePanelCfg_types.gen';
import type * as Table from '@grafana/schema/dist/esm/raw/composable/table/panelcfg/x/TablePanelCfg_types.gen';
import type * as Text from '@grafana/schema/dist/esm/raw/composable/text/panelcfg/x/TextPanelCfg_types.gen';
import type * as TimeSeries from '@grafana/schema/dist/esm/raw/composable/timeseries/panelcfg/x/TimeSeriesPanelCfg_types.gen';

/** T as JSON can write it: string enums become the union of their values, deeply. */
type Json<T> = T extends string
  ? `${T}`
  : T extends number | boolean | null | undefined
    ? T
    : T extends ReadonlyArray<infer E>
      ? Array<Json<E>>
      : T extends object
        ? { [K in keyof T]: Json<T[K]> }
        : T;

/** A panel's query: Prometheus through the board's `datasource` variable. */
interface PromQuery extends S.DataQuery {
  datasource: { type: 'prometheus'; uid: string };
  expr: string;
  editorMode?: 'code' | 'builder';
  format?: 'time_series' | 'table' | 'heatmap';
  instant?: boolean;
  range?: boolean;
  exemplar?: boolean;
  legendFormat?: string;
  interval?: string;
  intervalFactor?: number;
}

/** The schema's field config, with the plugin's own `custom` part. */
type FieldConfigSource<Custom> = Omit<S.FieldConfigSource, 'defaults'> & {
  defaults: Omit<S.FieldConfig, 'custom'> & { custom?: Partial<Custom> };
};

type PanelOf<Type extends string, Options, Custom> = Omit<
  S.Panel,
  'type' | 'options' | 'fieldConfig' | 'targets'
> & {
  type: Type;
  options?: Partial<Options>;
  fieldConfig?: FieldConfigSource<Custom>;
  targets?: PromQuery[];
};

/** Plugins without custom field config. */
type NoCustom = Record<string, never>;

type Panel =
  | PanelOf<'bargauge', BarGauge.Options, NoCustom>
  | PanelOf<'stat', Stat.Options, NoCustom>
  | PanelOf<'state-timeline', StateTimeline.Options, StateTimeline.FieldConfig>
  | PanelOf<'table', Table.Options, Table.FieldConfig>
  | PanelOf<'text', Text.Options, NoCustom>
  | PanelOf<'timeseries', TimeSeries.Options, TimeSeries.FieldConfig>;

type Row = Omit<S.RowPanel, 'panels'> & { panels: Panel[] };

/** What Grafana's Prometheus variable editor saves as a query variable's query. */
interface PromVariableQuery {
  qryType: number;
  query: string;
  refId: string;
}

type QueryVariable = Omit<S.VariableModel, 'type' | 'query'> & {
  type: 'query';
  definition?: string;
  query: PromVariableQuery;
};

type OtherVariable = Omit<S.VariableModel, 'type'> & {
  type: Exclude<S.VariableModel['type'], 'query'>;
};

export type Board = Json<
  Omit<S.Dashboard, 'panels' | 'templating'> & {
    panels?: Array<Panel | Row>;
    templating?: { list?: Array<QueryVariable | OtherVariable> };
  }
>;
