// The lint of scripts/test.sh for the extension (issue 36): eslint's recommended rules and
// typescript-eslint's, over the sources and tests tsc compiles (tsconfig.json).
import js from "@eslint/js";
import tseslint from "typescript-eslint";

export default tseslint.config(
  { ignores: ["out/**", "dist/**", "node_modules/**", "scripts/**"] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    files: ["src/**/*.ts", "test/**/*.ts"],
    languageOptions: { ecmaVersion: 2022, sourceType: "module" },
    rules: {
      // a name starting with _ is left unused on purpose (a key dropped by destructuring)
      "@typescript-eslint/no-unused-vars": ["error", { argsIgnorePattern: "^_",
        varsIgnorePattern: "^_" }],
    },
  },
);
