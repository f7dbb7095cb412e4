/** The GPU icon shown on the sidebar tab, the palette and dashboard tabs. */
import { LabIcon } from '@jupyterlab/ui-components';

import gpuSvgstr from '../../style/icons/gpu.svg';

export const gpuIcon = new LabIcon({
  name: 'nvdashboard:gpu',
  svgstr: gpuSvgstr
});
