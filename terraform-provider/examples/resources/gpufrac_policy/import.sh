# <name>@<namespace>, or <name> alone for the provider's namespace.
terraform import gpufrac_policy.training training@ml
