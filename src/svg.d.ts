// SVG files are bundled as raw strings (JupyterLab's builder and the jest
// preset both load them that way).
declare module '*.svg' {
  const value: string;
  export default value;
}
