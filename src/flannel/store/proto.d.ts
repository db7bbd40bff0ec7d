// .proto files imported as text (esbuild's `with { type: 'text' }`).
declare module '*.proto' {
  const text: string;
  export default text;
}
