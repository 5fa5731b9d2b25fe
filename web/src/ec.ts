// ECharts with the parts taskscope draws with. Loaded on demand (charts.ts)
// so that tables render before the chart library has been parsed.
import * as echarts from 'echarts/core';
import { LineChart, BarChart, CustomChart, BoxplotChart, ScatterChart } from 'echarts/charts';
import { GridComponent, TooltipComponent, LegendComponent, DataZoomComponent, MarkLineComponent, TitleComponent, AxisPointerComponent } from 'echarts/components';
import { CanvasRenderer, SVGRenderer } from 'echarts/renderers';

echarts.use([LineChart, BarChart, CustomChart, BoxplotChart, ScatterChart, GridComponent, TooltipComponent, LegendComponent,
  DataZoomComponent, MarkLineComponent, TitleComponent, AxisPointerComponent, CanvasRenderer, SVGRenderer]);

export { echarts };
