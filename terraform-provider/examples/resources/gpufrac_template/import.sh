terraform import gpufrac_template.llama_7b_finetune llama-7b-finetune@ml
